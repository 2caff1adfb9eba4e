"""`python -m memlens.core.native`: build the native helpers now (the set-up does this once)."""

import sys

from memlens.core.native import load, unavailable_reason


def main() -> int:
    if load() is not None:
        print("memlens: native helpers ready")
        return 0
    print(f"memlens: native helpers unavailable ({unavailable_reason()}); "
          "precise mode uses the Python tracker", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
