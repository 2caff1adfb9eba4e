"""One installed namespace: `import memlens` works from any folder, and nothing installs a
generic top-level `core`, `app`, `benchmarks` or `main`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
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


def test_the_wheel_holds_every_module_and_resource_and_nothing_else(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", str(ROOT), "-w", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("memlens-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"memlens"}
    tracked = subprocess.run(["git", "ls-files", "memlens"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    shipped = [f for f in tracked if Path(f).suffix in
               {".py", ".cpp", ".h", ".qss", ".svg", ".html", ".typed"}]
    assert "memlens/py.typed" in shipped and "memlens/core/native/recorder.h" in shipped
    missing = sorted(set(shipped) - names)
    assert not missing, missing
