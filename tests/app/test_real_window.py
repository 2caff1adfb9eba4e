"""The app in a real X window (Xvfb, the xcb platform), driven by real clicks (xdotool).

Every other app test runs offscreen, where a missing system library or a click that never
reaches a widget goes unseen. Here `python main.py`'s own start-up runs in a child process
on an Xvfb display of its own (never the user's), and the X server delivers the clicks.
Where Xvfb, xdotool, ImageMagick's `import` or Qt's xcb libraries are missing, the test
skips and says which (.ci/run installs them when it runs as root).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memlens.app.platform_check import check

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("Xvfb", "xdotool", "import")
SCREEN = (1600, 1000)


def _skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "real-window test: Linux (X11) only"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return (f"real-window test: {', '.join(absent)} not installed "
                "(apt-get install xvfb xdotool imagemagick; .ci/run does it as root)")
    report = check({"DISPLAY": ":0"})  # what the xcb plugin needs, on any display
    if not report.ok:
        return "real-window test: " + report.message.splitlines()[0]
    return None


class LineReader:
    """Lines from a child's pipe, waited for with a deadline (no sleeps)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.buffer = b""
        self.seen: list[str] = []

    def next(self, deadline: float) -> str | None:
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.stream], [], [], left)[0]:
                return None
            chunk = os.read(self.stream.fileno(), 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        text = line.decode(errors="replace")
        self.seen.append(text)
        return text

    def until(self, predicate, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while (line := self.next(deadline)) is not None:
            try:
                state = json.loads(line)
            except ValueError:
                continue  # a warning on stdout, not ours
            if predicate(state):
                return state
        tail = "\n".join(self.seen[-5:])
        raise AssertionError(f"timed out waiting for {what}; last lines:\n{tail}")


@pytest.fixture
def xvfb(request):
    """A fresh Xvfb on a free display (-displayfd picks it and says when it is ready), of
    SCREEN's size or the test's parameter."""
    screen = getattr(request, "param", SCREEN)
    reason = _skip_reason()
    if reason:
        print(reason)
        pytest.skip(reason)
    read, write = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{screen[0]}x{screen[1]}x24",
         "-nolisten", "tcp"], pass_fds=(write,), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    os.close(write)
    try:
        number = LineReader(os.fdopen(read, "rb")).next(time.monotonic() + 20)
        if not number:
            server.kill()
            err = server.communicate(timeout=10)[1].decode(errors="replace").strip()
            reason = f"real-window test: Xvfb did not start: {err[-300:] or 'no display number'}"
            print(reason)
            pytest.skip(reason)
        yield f":{number.strip()}"
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=10)


def xdotool(display: str, *args: str) -> None:
    subprocess.run(["xdotool", *args], env={**os.environ, "DISPLAY": display}, check=True,
                   timeout=20)


def start_child(display: str, tmp_path: Path, config: Path | None = None):
    """main.py's start-up in a child on `display`, with a settings store of its own (the
    app remembers settings between launches: nothing may carry into the next test or into
    the user's app). Returns the child, its output's reader and its stderr's file."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}  # no forced platform: xcb
    config = config or tmp_path / "config"
    env.update(DISPLAY=display, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
               XDG_CONFIG_HOME=str(config))
    # The runs folder File > Runs folder sets, in the child's own store (user_store's file).
    from memlens.app.app_settings import AppSettings

    store = AppSettings.at(config / "memlens" / "memlens.ini")
    store.set_runs_folder(tmp_path / "runs")
    store.sync()
    log = tmp_path / "child-stderr.txt"
    with log.open("wb") as err:  # a file, not a pipe: Qt's warnings can never block the child
        child = subprocess.Popen([sys.executable, "-m", "tests.app.real_window_child"],
                                 cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err)
    return child, LineReader(child.stdout), log


def end_child(child, log: Path) -> None:
    if child.poll() is None:
        child.kill()
        child.wait(timeout=10)
    text = log.read_text(errors="replace").strip()
    if text:
        print("child stderr:\n" + text[-3000:])


def inside(outer: list[int], r: list[int]) -> bool:
    x, y, w, h = outer
    return x <= r[0] and y <= r[1] and r[0] + r[2] <= x + w and r[1] + r[3] <= y + h


def test_the_window_opens_runs_on_a_real_click_marks_a_toggle_and_closes(xvfb, tmp_path):
    child, out, log = start_child(xvfb, tmp_path)
    try:
        first = out.until(lambda s: "qpa" in s or "exit" in s, 60, "the window")
        assert first.get("qpa") == "xcb", first  # {"exit": 1}: main.py's check said no
        state = out.until(lambda s: s.get("exposed") and s["start_enabled"], 30,
                          "the window exposed on the X screen")
        assert state["steps"] == 0
        # A real click: the X server's pointer, pressed over the Start button.
        xdotool(xvfb, "mousemove", *map(str, state["start"]), "click", "1")
        state = out.until(lambda s: s["steps"] >= 5, 60, "5 steps after the click on Start")
        assert state["toggle_checked"] is True and state["toggles"] == []
        xdotool(xvfb, "mousemove", *map(str, state["toggle"]), "click", "1")
        state = out.until(lambda s: s["toggles"] and all(s["markers"]), 30,
                          "the toggle's event and its marker on every plot")
        step, key, old, new = state["toggles"][0]
        assert (key, old, new) == ("eval_mode", "True", "False")
        assert state["toggle_checked"] is False
        assert all(m == [step] for m in state["markers"]), state["markers"]
        out.until(lambda s: s["steps"] >= step + 3, 30, "steps after the toggle")

        # The X screen itself, not a widget grab: what a user would see.
        shot = tmp_path / "x-screen.png"
        subprocess.run(["import", "-display", xvfb, "-window", "root", str(shot)], check=True,
                       timeout=30)
        print(f"X screen: {shot}")
        from PySide6.QtGui import QImage

        from tests.app.drive import pixels

        image = QImage(str(shot))
        assert (image.width(), image.height()) == SCREEN
        rgb = pixels(image)[:, :, :3].reshape(-1, 3)
        colours = np.unique(rgb[:: 7], axis=0)  # every 7th pixel is plenty to count them
        assert len(colours) > 50 and rgb.std() > 10, "the X screen looks blank"

        # Ctrl+Q with the pointer over the window (no window manager: focus follows it).
        xdotool(xvfb, "mousemove", str(SCREEN[0] // 3), str(SCREEN[1] // 3), "key", "ctrl+q")
        assert out.until(lambda s: "exit" in s, 30, "the window to close")["exit"] == 0
        assert child.wait(timeout=30) == 0
        # The run went to disk in the child's folder as the worker wrote it.
        assert any((tmp_path / "runs").glob("*/steps.csv"))
    finally:
        end_child(child, log)


SMALL = (1280, 800)


@pytest.mark.parametrize("xvfb", [SMALL], indirect=True)
def test_on_a_1280x800_screen_every_part_of_the_window_is_on_it_first_and_when_remembered(
        xvfb, tmp_path):
    """No window manager: the window's frame is its geometry. Its first size fits the
    screen; a geometry remembered from a larger screen (here: the window moved and grown
    past the screen's edges before it closed) is brought back onto it."""
    config = tmp_path / "config"
    frames = []
    for launch in ("first", "remembered"):
        child, out, log = start_child(xvfb, tmp_path, config)
        try:
            state = out.until(lambda s: s.get("exposed"), 60, "the window exposed")
            screen = state["screen"]
            assert screen[2:] == list(SMALL), state["screen"]
            assert inside(screen, state["frame"]), (launch, state["frame"])
            assert "RunStatusBar" in state["parts"] and "run_dock" in state["parts"]
            for name, r in state["parts"].items():
                assert inside(screen, r), (launch, name, r, screen)
            frames.append(state["frame"])
            if launch == "first":  # as a larger screen would have left it
                xdotool(xvfb, "search", "--sync", "--pid", str(child.pid), "--name", "memlens",
                        "windowmove", "%@", "600", "300", "windowsize", "%@", "1800", "1100")
                state = out.until(lambda s: s["frame"][2] > SMALL[0], 30, "the larger window")
            x, y, w, h = state["parts"]["RunStatusBar"]  # a click gives the window focus
            x, y = min(x + w // 2, SMALL[0] - 5), min(y + h // 2, SMALL[1] - 5)
            xdotool(xvfb, "mousemove", str(x), str(y), "click", "1", "key", "ctrl+q")
            assert out.until(lambda s: "exit" in s, 30, "the window to close")["exit"] == 0
            assert child.wait(timeout=30) == 0
        finally:
            end_child(child, log)


def test_without_the_x_tools_the_reason_names_what_to_install(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "xdotool" else "/bin/x")
    reason = _skip_reason()
    assert reason is not None and "xdotool not installed" in reason and "apt-get" in reason
    monkeypatch.setattr(sys, "platform", "darwin")
    assert "Linux (X11) only" in _skip_reason()
