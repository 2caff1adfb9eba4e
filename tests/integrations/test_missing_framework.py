"""Neither framework is a dependency: memlens imports without them, and an integration
whose framework is missing says what to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# None in sys.modules makes `import name` raise ImportError, as a missing package does
BLOCK = ("import sys\n"
         "for m in ('lightning', 'lightning.pytorch', 'pytorch_lightning', 'transformers'):\n"
         "    sys.modules[m] = None\n")


@pytest.mark.parametrize("module, install", [("lightning", "pip install lightning"),
                                             ("transformers", "pip install transformers")])
def test_a_missing_framework_is_named_with_its_install_command(module, install):
    code = BLOCK + (
        "import memlens, memlens.integrations.attach\n"
        "try:\n"
        f"    import memlens.integrations.{module}\n"
        "except ImportError as exc:\n"
        "    print('IMPORT-ERROR', exc)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    line = p.stdout.strip().splitlines()[-1]
    assert line.startswith("IMPORT-ERROR") and line.endswith(install)


def test_memlens_and_its_watch_never_import_a_framework():
    code = ("import sys, memlens, memlens.core.watch.session, memlens.integrations.attach\n"
            "print([m for m in ('lightning', 'pytorch_lightning', 'transformers') "
            "if m in sys.modules])\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
