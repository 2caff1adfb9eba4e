"""`python main.py` from a source checkout: the same as `python -m memlens`."""

import sys

from memlens.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
