"""How the app opens: `python main.py`, `python main.py app` and `./dev` (which runs main.py
with no arguments) all open the window."""

from __future__ import annotations

import main


def test_main_with_no_command_or_app_opens_the_window(monkeypatch):
    import memlens.app.main_window

    opened: list[int] = []
    monkeypatch.setattr(memlens.app.main_window, "launch", lambda **_: opened.append(1) or 0)
    assert main.main([]) == 0
    assert main.main(["app"]) == 0
    assert opened == [1, 1]
