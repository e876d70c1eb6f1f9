"""``python -m qcore``: the ``qcore`` command (see :mod:`qcore.cli`)."""

import sys

from qcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
