"""One installed namespace: `import memlens` works from any folder, and nothing installs a
generic top-level `core`, `app`, `benchmarks` or `main`."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})


def test_import_memlens_works_from_another_folder_and_core_does_not(tmp_path):
    p = _python("import memlens, memlens.core.config, memlens.app, sys;"
                "print(memlens.core.config.RunConfig().preset)", tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "mlp"
    for generic in ("core", "app", "benchmarks", "main"):
        p = _python(f"import {generic}", tmp_path)
        assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr, (generic, p.stdout)


def test_python_dash_m_memlens_is_the_cli(tmp_path):
    p = subprocess.run([sys.executable, "-m", "memlens", "--help"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "run" in p.stdout and "graph" in p.stdout


def test_every_package_folder_is_in_the_wheel():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = config["package-dir"]
    found = {"memlens"}
    for name, folder in mapped.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((name, *rel)))
    assert found == listed
    assert "py-modules" not in config
    assert not any(p.split(".")[0] != "memlens" for p in listed)
