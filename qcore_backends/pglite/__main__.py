"""``python -m qcore_backends.pglite install``: fetch the PGlite npm packages into the cache now."""

from __future__ import annotations

import argparse
import sys

from qcore_backends.pglite.server import PGliteServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qcore_backends.pglite")
    parser.add_argument("command", choices=["install"])
    parser.parse_args(argv)
    server = PGliteServer()
    server.ensure_installed()
    print(f"PGlite packages installed in {server.install_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
