"""Start-up stays cheap, the shot command works end to end, and Qt keeps None alive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout)


def test_cli_start_up_imports_no_qt_and_no_torch():
    r = run_python(
        "import argparse, sys, main\n"
        "p = argparse.ArgumentParser(); sub = p.add_subparsers()\n"
        "import memlens.cli.shot; memlens.cli.shot.add_parser(sub)\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'torch', 'pyqtgraph')]\n"
        "print(heavy)\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_window_opens_without_importing_torch():
    r = run_python(
        "import sys\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from memlens.app.window.main_window import MainWindow\n"
        "w = MainWindow(runs_dir=None); w.show(); app.processEvents()\n"
        "print('torch' in sys.modules, sys.modules['pyqtgraph'].Qt.QT_LIB)\n"
        "w.close()\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "PySide6"]


# Runs main.py as `python main.py` does; at the event loop's start and again once the main
# window's first paint is done, prints what is imported then, and quits.
FIRST_PAINT_PROBE = """
import os, runpy, sys
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication, QMainWindow

def loaded(when):
    cli = sorted(m for m in sys.modules if m.startswith('memlens.cli.'))
    print(when, 'torch' in sys.modules, ','.join(cli), flush=True)

class FirstPaint(QObject):
    def eventFilter(self, obj, event):
        if event.type() in (QEvent.UpdateRequest, QEvent.Paint) and not self.seen:
            self.seen = True
            QTimer.singleShot(0, lambda: (loaded('painted'), os._exit(0)))
        return False

def exec_(self):
    loaded('exec')
    self.spy = FirstPaint()
    self.spy.seen = False
    for w in QApplication.topLevelWidgets():
        if isinstance(w, QMainWindow):
            w.installEventFilter(self.spy)
    return original()

original = QApplication.exec
QApplication.exec = exec_
sys.argv = ['main.py']
runpy.run_path('main.py', run_name='__main__')
"""


def test_main_py_paints_its_first_window_before_torch_is_imported(tmp_path):
    r = subprocess.run([sys.executable, "-c", FIRST_PAINT_PROBE], cwd=ROOT, text=True,
                       capture_output=True, timeout=120,
                       env={**os.environ, "QT_QPA_PLATFORM": "offscreen",
                            "XDG_CONFIG_HOME": str(tmp_path)})  # no one's own settings
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln.split(" ") for ln in r.stdout.splitlines()]
    assert [ln[0] for ln in lines] == ["exec", "painted"], r.stdout
    for when, torch_loaded, cli in lines:
        assert torch_loaded == "False", f"torch imported by the {when} mark"
        # only the command that runs (app) and what commands share (args) are imported
        assert cli == "memlens.cli.app,memlens.cli.args", (when, cli)


def test_qt_calls_keep_none_alive():
    # PySide6 6.12.0 on CPython 3.11 drops a reference to None on every void Qt call, and a
    # live window aborts the interpreter within seconds ("none_dealloc"); pyproject pins
    # PySide6 below 6.12. This fails on a build with that bug, before a user meets it.
    r = run_python(
        "import sys, app\n"
        "from PySide6.QtWidgets import QApplication, QLabel\n"
        "a = QApplication([]); label = QLabel()\n"
        "before = sys.getrefcount(None)\n"
        "for i in range(1000): label.setText('x')\n"
        "print(sys.getrefcount(None) - before)\n"
        "for i in range(50_000): label.setText('x')\n"
        "print('ok')\n"
    )
    assert r.returncode == 0, r.stderr[-500:]
    delta, ok = r.stdout.split()
    assert ok == "ok" and abs(int(delta)) < 100, delta


def test_shot_saves_the_window_after_n_steps(tmp_path):
    out = tmp_path / "shot.png"
    r = subprocess.run(
        [sys.executable, "main.py", "shot", "--preset", "mlp", "--set", "batch_size=8",
         "width=16", "--at", "3:zero_grad=off", "--steps", "6", "--out", str(out)],
        cwd=ROOT, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}, text=True,
        capture_output=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "6 steps" in r.stdout
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_shot_rejects_bad_settings_with_a_message(tmp_path):
    r = subprocess.run(
        [sys.executable, "main.py", "shot", "--set", "batch_size=lots", "--out",
         str(tmp_path / "x.png")],
        cwd=ROOT, text=True, capture_output=True, timeout=120,
    )
    assert r.returncode == 2
    assert "batch_size" in r.stderr and "Traceback" not in r.stderr


def test_launch_shortens_the_gil_switch_interval_before_the_event_loop():
    # The training thread holds the GIL up to the switch interval each time the GUI thread
    # needs it; launch() shortens it before the first frame, as the benchmarks mirror.
    r = run_python(
        "import sys\n"
        "from PySide6.QtWidgets import QApplication\n"
        "QApplication.exec = lambda self: print(sys.getswitchinterval(),\n"
        "    [w.objectName() for w in QApplication.topLevelWidgets() if w.isVisible()]) or 0\n"
        "print(sys.getswitchinterval())\n"
        "from memlens.app.window.launch import SWITCH_INTERVAL_S, launch\n"
        "print(SWITCH_INTERVAL_S)\n"
        "sys.exit(launch([]))\n"
    )
    assert r.returncode == 0, r.stderr[-500:]
    default, wanted, during, shown = r.stdout.split(maxsplit=3)
    assert float(default) == 0.005 and float(wanted) < float(default)
    assert abs(float(during) - float(wanted)) < 1e-9 and "main_window" in shown


def test_worker_freezes_what_the_first_preset_build_imports():
    # Building a preset's optimizer imports torch._dynamo and sympy (~120k objects). If the
    # worker froze the collector before that, every full collection would walk them all and
    # pause the GUI thread for 0.15-0.25 s.
    r = run_python(
        "import gc, torch\n"
        "from memlens.app.window.run_session import core_training\n"
        "from memlens.core.config import RunConfig\n"
        "from memlens.core.preset_factory import build_preset\n"
        "core_training()\n"
        "n0 = len(gc.get_objects())\n"
        "build_preset(RunConfig(preset='mlp'), torch.device('cpu'))\n"
        "print(len(gc.get_objects()) - n0)\n",
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-500:]
    assert int(r.stdout.strip()) < 10_000
