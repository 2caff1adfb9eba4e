"""`python tests/import_contracts.py`: import-linter's contracts (pyproject.toml) on memlens,
run from the checkout so that the checkout's memlens is the one checked."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importlinter.cli import lint_imports_command

if __name__ == "__main__":
    sys.argv[0] = "lint-imports"
    sys.exit(lint_imports_command())
