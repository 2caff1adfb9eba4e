"""`python tests/import_contracts.py`: import-linter's contracts (pyproject.toml) on memlens.

memlens is imported first: in a source checkout its search path then holds the checkout's
root, which is how `memlens.core` is `core/` (memlens/__init__.py), and import-linter builds
its graph from that search path.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importlinter.cli import lint_imports_command

import memlens  # noqa: F401 - see above

if __name__ == "__main__":
    sys.argv[0] = "lint-imports"
    sys.exit(lint_imports_command())
