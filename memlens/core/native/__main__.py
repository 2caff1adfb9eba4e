"""`python -m memlens.core.native`: build the native helpers now (the set-up does this once).
A build that failed before for this torch, Python and compiler is not tried again (its reason
is printed); `--retry` tries it once more."""

import os
import sys

from memlens.core.native import RETRY_ENV, load, unavailable_reason


def main(argv: list[str] | None = None) -> int:
    if "--retry" in (sys.argv[1:] if argv is None else argv):
        os.environ[RETRY_ENV] = "1"
    if load() is not None:
        print("memlens: native helpers ready")
        return 0
    print(f"memlens: native helpers unavailable ({unavailable_reason()}); "
          "precise mode uses the Python tracker", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
