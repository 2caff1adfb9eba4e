"""Byte figures in event texts (a leak's "grows 522 KiB per step", a watch diagnosis's held
bytes) keep their values, so the app writes them again in exact bytes after the fact
(View > Exact bytes, #31 item 7), also for a run folder read back."""

from __future__ import annotations

import json

from memlens.__main__ import main as memlens_main
from memlens.core import units
from memlens.core.records import RunEvent
from memlens.core.runfolder.reader import load_run
from memlens.core.units import byte_figure


def test_an_events_byte_figures_are_written_in_the_display_of_the_moment():
    e = RunEvent(3, 0.1, "leak", key="memory growth", message="memory keeps growing",
                 explanation=f"grows {byte_figure(1536)} per step ({byte_figure(3 * 2**20)})")
    assert e.explanation == "grows 1.50 KiB per step (3.00 MiB)"
    units.set_exact_bytes(True)
    try:
        assert e.rerender()
        assert e.explanation == "grows 1,536 B per step (3,145,728 B)"
        assert e.message == "memory keeps growing"
    finally:
        units.set_exact_bytes(False)
    e.rerender()
    assert e.explanation == "grows 1.50 KiB per step (3.00 MiB)"
    plain = RunEvent(3, 0.1, "info", key="note", message="no figures here: 12 MiB as text")
    assert not plain.rerender() and "templates" not in plain.to_dict()  # run.json as before


def test_a_leak_read_back_from_its_run_folder_rerenders_in_exact_bytes(tmp_path):
    out = tmp_path / "leak"
    assert memlens_main(["run", "--preset", "mlp", "--steps", "20", "--set", "eval_every=0",
                         "--at", "4:leak_cache=true", "--quiet", "--out", str(out)]) == 0
    written = [e for e in json.loads((out / "run.json").read_text())["events"]
               if e["kind"] == "leak"]
    assert written and "\ue000" not in written[0]["explanation"]  # readable as written
    assert "templates" in written[0]
    (leak,) = [e for e in load_run(out).events() if e.kind == "leak"]
    assert leak.explanation == written[0]["explanation"]
    binary = leak.explanation
    units.set_exact_bytes(True)
    try:
        leak.rerender()
        assert leak.explanation != binary and "KiB" not in leak.explanation
        assert " B per step" in leak.explanation
    finally:
        units.set_exact_bytes(False)
