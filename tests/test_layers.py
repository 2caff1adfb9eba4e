"""The layer rules: core/ never imports Qt (checked by importing every core module), and
import-linter's contracts (pyproject.toml) hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_importing_every_core_module_loads_no_qt():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "memlens" / "core").rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph', 'shiboken6') "
        "or m.startswith('memlens.app')]\n"
        "print(','.join(bad))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "", f"core imported Qt modules: {p.stdout}"
    assert len(modules) > 10


def test_import_linter_contracts_hold():
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "import_contracts.py")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout and "app layers" in p.stdout
