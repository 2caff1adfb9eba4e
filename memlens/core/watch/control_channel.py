"""The control channel of a watched script: a file of JSON lines that another process (the
app's File > Watch a script) appends commands to, read by the watch at each step boundary.

A file and not a socket: nothing to connect or accept, no thread in the user's process,
and it survives either side starting late. The watch reads only the bytes appended since
its last read (one stat a step when nothing came), and only whole lines; a line that is
not a command is skipped. Commands:

    {"set": "amp", "value": "bf16"}     a technique change (core.watch.toggles), applied
                                        at the next step boundary
    {"pause": true} / {"resume": true}  wait at the next step boundary / go on
    {"stop": true}                      end the script at the next step boundary (files
                                        complete; a paused script stops at once)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class WatchStopped(BaseException):
    """Raised in the watched script where its next step would begin, after a stop command:
    a BaseException, as KeyboardInterrupt, so the script's `except Exception` lets it
    through and the watch ends its files (run.json: stopped_by "stopped")."""


def write_command(path: str | Path, command: dict[str, Any]) -> None:
    """Append one command (one line, one write: a reader never sees half of it)."""
    line = (json.dumps(command) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class ControlFile:
    """The reading side: the commands appended since the last `read()`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            if os.stat(self.path).st_size <= self._offset:
                return []
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:  # not made yet, or gone: no command
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        out = []
        for line in data[:end].splitlines():
            try:
                command = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(command, dict):
                out.append(command)
        return out
