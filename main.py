"""`python main.py` from a source checkout: the same as `python -m memlens`.

Where this Python lacks what memlens needs (torch, Qt), it hands over to ./dev, which sets up
.venv the first time (README) and runs memlens there, with the same arguments.
"""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

NEEDS = ("numpy", "torch", "PySide6", "pyqtgraph")
DEV_ENV = "MEMLENS_VIA_DEV"  # set by ./dev: never hand over twice


def _hand_over_if_missing() -> None:
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if not missing:
        return
    dev, bash = Path(__file__).resolve().with_name("dev"), shutil.which("bash")
    if os.environ.get(DEV_ENV) or not dev.exists() or bash is None:
        print(f"memlens: {', '.join(missing)} not installed for {sys.executable}; run ./dev "
              "(it sets up .venv) or `pip install -e .` in this Python", file=sys.stderr)
        sys.exit(2)
    print(f"memlens: {', '.join(missing)} not installed for {sys.executable}: running it "
          "through ./dev, which sets up .venv on its first run", file=sys.stderr, flush=True)
    os.execv(bash, [bash, str(dev), "app", *sys.argv[1:]])


def main(argv: list[str] | None = None) -> int:
    _hand_over_if_missing()
    from memlens.__main__ import main as memlens_main

    return memlens_main(argv)


if __name__ == "__main__":
    sys.exit(main())
