"""`python -m core.native`: build the native helpers now (the set-up does this once)."""

import sys

from core.native import alloc_recorder, unavailable_reason


def main() -> int:
    if alloc_recorder() is not None:
        print("memlens: native allocation recorder ready")
        return 0
    print(f"memlens: native allocation recorder unavailable ({unavailable_reason()}); "
          "precise mode uses the Python tracker", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
