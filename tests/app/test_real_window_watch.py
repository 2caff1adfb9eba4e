"""File > Watch a script… in a real X window (Xvfb, xcb), driven by real clicks (xdotool):
a technique checkbox clicked while the watched script runs becomes its toggle event and a
marker on every plot, detach_state is greyed (no carried state), and a click on Stop ends
the child with complete files. The window and X tools as tests/app/test_real_window.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.app.test_real_window import ROOT, LineReader, end_child, xdotool, xvfb  # noqa: F401


def test_a_real_click_toggles_a_watched_script_and_stop_ends_it(xvfb, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=xvfb, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    from memlens.app.app_settings import AppSettings

    store = AppSettings.at(tmp_path / "config" / "memlens" / "memlens.ini")
    store.set_runs_folder(tmp_path / "runs")
    store.sync()
    log = tmp_path / "child-stderr.txt"
    with log.open("wb") as err:
        child = subprocess.Popen([sys.executable, "-m", "tests.app.real_window_watch_child"],
                                 cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err)
    out = LineReader(child.stdout)
    try:
        first = out.until(lambda s: "qpa" in s or "exit" in s, 60, "the window")
        assert first.get("qpa") == "xcb", first
        state = out.until(lambda s: s.get("exposed") and s["state"] == "running"
                          and s["steps"] >= 3, 120, "the watched script's first steps")
        assert state["alive"] and state["stop_enabled"]
        assert state["detach_enabled"] is False  # greyed: no carried state seen
        assert "zero_grad(set_to_none=True)" in state["uses"]
        xdotool(xvfb, "mousemove", *map(str, state["toggle"]), "click", "1")
        state = out.until(lambda s: s["toggles"] and all(s["markers"]), 60,
                          "the toggle's event and its marker on every plot")
        step, key, old, new = state["toggles"][0]
        assert (key, old, new) == ("no_grad_eval", "False", "True")
        assert state["toggle_checked"] is True
        assert all(m == [step] for m in state["markers"]), state["markers"]
        xdotool(xvfb, "mousemove", *map(str, state["stop"]), "click", "1")
        state = out.until(lambda s: not s["alive"], 60, "the script to stop")
        doc = json.loads((Path(state["folder"]) / "run.json").read_text())
        assert doc["finished"] is True and doc["summary"]["stopped_by"] == "stopped"
        assert [e["key"] for e in doc["events"] if e["kind"] == "toggle"] == ["no_grad_eval"]
        xdotool(xvfb, "mousemove", "400", "300", "key", "ctrl+q")
        assert out.until(lambda s: "exit" in s, 30, "the window to close")["exit"] == 0
        assert child.wait(timeout=30) == 0
    finally:
        end_child(child, log)
