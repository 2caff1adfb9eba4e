"""How the app opens: `python main.py`, `python main.py app` and `./dev` (which runs main.py
with no arguments) all open the window."""

from __future__ import annotations

import main


def test_main_with_no_command_or_app_opens_the_window(monkeypatch):
    import memlens.app.window.launch

    opened: list[dict] = []
    monkeypatch.setattr(memlens.app.window.launch, "launch",
                        lambda **kw: opened.append(kw) or 0)
    assert main.main([]) == 0
    assert main.main(["app"]) == 0
    assert opened == [{"open_path": None, "follow": None}] * 2
