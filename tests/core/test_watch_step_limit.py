"""The watch's step limit (`main.py watch --stop-after N`, Watch(stop_after=N)): the script
ends where its step N+1 would begin, the run folder complete, and the steps that ran are
the script's own, unchanged."""

from __future__ import annotations

import csv
import json

from memlens.__main__ import main as memlens_main
from tests.core.test_watch import ADAM_LOOP, plain, write


def _steps_rows(folder) -> list[dict]:
    with open(folder / "steps.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_stop_after_ends_the_script_at_the_step_boundary_with_its_results(tmp_path, capsys):
    plain(tmp_path, ADAM_LOOP, ["6"])
    losses = capsys.readouterr().out.splitlines()
    script = write(tmp_path, ADAM_LOOP)
    code = memlens_main(["watch", "--stop-after", "3", "--out", str(tmp_path / "run"),
                         str(script), "6"])
    out = capsys.readouterr()
    assert code == 0
    # each step's print after its optimizer step ran; no fourth step began
    assert out.out.splitlines() == losses[:3]
    rows = _steps_rows(tmp_path / "run")
    assert [int(r["step"]) for r in rows] == [0, 1, 2]
    assert [r["loss"] for r in rows] == [f"{float(v):.6g}" for v in losses[:3]]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["finished"] is True and doc["summary"]["stopped_by"] == "stopped"
    assert doc["summary"]["extra"]["error"] is None
    assert "stopped after 3 steps" in out.err


def test_a_script_of_fewer_steps_runs_to_its_end(tmp_path, capsys):
    script = write(tmp_path, ADAM_LOOP + "print('the end')\n")
    code = memlens_main(["watch", "--stop-after", "5", "--out", str(tmp_path / "run"),
                         str(script), "2"])
    assert code == 0 and capsys.readouterr().out.splitlines()[-1] == "the end"
    assert len(_steps_rows(tmp_path / "run")) == 2


def test_a_scripts_own_except_exception_does_not_swallow_the_stop(tmp_path, capsys):
    from memlens.core.watch.script import run_script

    guarded = ADAM_LOOP.replace("for step in", "try:\n  for step in").replace(
        "\n    ", "\n      ") + "except Exception:\n  print('swallowed')\n"
    path = write(tmp_path, guarded)
    code = run_script(str(path), ["8"], out=tmp_path / "run", quiet=True, stop_after=2)
    assert code == 0
    assert len(_steps_rows(tmp_path / "run")) == 2
    assert "swallowed" not in capsys.readouterr().out
