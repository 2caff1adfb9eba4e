"""A disk that fills during a run: the run stops with exit 2, the rows written stay, and
run.json still gets its summary (`stopped_by: write_error`, as the README promises) though
no new file can be written there any more: it is rewritten in the space it holds."""

from __future__ import annotations

import errno
import json
import os

import main
from tests.core.cli_child import TINY


def test_a_disk_full_for_every_new_write_still_ends_run_json(tmp_path, capsys, monkeypatch):
    import memlens.core.runfolder.writer as writer
    from memlens.core.runfolder.writer import FolderFiles

    full = []
    real_steps, real_atomic = FolderFiles.on_steps, writer.atomic_write_text

    def no_space(*_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def on_steps(self, rows):  # on the writer's thread, where a real disk fills up
        if full or any(r.step >= 3 for r, _ in rows):
            full.append(True)
            no_space()
        real_steps(self, rows)

    def atomic_write_text(path, text):  # a temporary file beside run.json: no room either
        if full:
            no_space()
        real_atomic(path, text)

    monkeypatch.setattr(FolderFiles, "on_steps", on_steps)
    monkeypatch.setattr(writer, "atomic_write_text", atomic_write_text)
    out = tmp_path / "r"
    code = main.main(["run", "--steps", "50", *TINY, "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "No space left on device" in err and "Traceback" not in err
    rows = (out / "steps.csv").read_text().splitlines()[1:]
    doc = json.loads((out / "run.json").read_text())
    assert full and doc["summary"] is not None, err
    assert doc["summary"]["stopped_by"] == "write_error"
    assert doc["summary"]["steps_done"] < 50 and len(rows) <= 3
