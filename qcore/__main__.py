"""The ``qcore`` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qcore", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the end-to-end demo on an embedded PGlite")
    demo.add_argument("--dsn", help="run against this PostgreSQL instead of PGlite")
    args = parser.parse_args(argv)
    if args.command == "demo":
        print("qcore demo: coming soon — workers land with the next release.")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
