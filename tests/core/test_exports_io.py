"""export_run and `main.py export`: formats, atomic writes, clear errors, exit codes."""

from __future__ import annotations

import errno
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import memlens.core.exports.chrome_trace as chrome_trace
from memlens.__main__ import main as memlens
from memlens.core.exports import export_run, parse_formats
from memlens.core.history import RunHistory
from memlens.core.runfolder.atomic import ExportError
from memlens.core.runfolder.history_files import write_history
from tests.core.export_histories import small_history
from tests.core.helpers import run


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_parse_formats():
    assert parse_formats("all") == ["snapshot", "trace", "timeline"]
    assert parse_formats("timeline, trace") == ["trace", "timeline"]
    assert parse_formats(["TRACE"]) == ["trace"]
    with pytest.raises(ValueError, match="unknown export format 'pdf'"):
        parse_formats("trace,pdf")
    with pytest.raises(ValueError, match="no export format"):
        parse_formats(" , ")


def test_all_formats_from_a_precise_run(tmp_path):
    history, _ = small_history()
    written = export_run(history, tmp_path / "out", "all")
    assert [p.name for p in written] == ["snapshot.pickle", "trace.json", "memory_timeline.json"]
    assert all(p.parent == tmp_path / "out" and p.stat().st_size > 0 for p in written)
    assert leftovers(tmp_path / "out") == []


def _fail_midway(monkeypatch, exc: BaseException) -> None:
    """Make trace.json's writer fail after it has written part of the file."""
    real = chrome_trace._counter_chunks

    def failing(*args):
        gen = real(*args)
        yield next(gen)
        raise exc

    monkeypatch.setattr(chrome_trace, "_counter_chunks", failing)


@pytest.mark.parametrize("exc", [RuntimeError("boom"), OSError(errno.ENOSPC, "No space left")])
def test_a_failure_mid_write_keeps_the_old_file(tmp_path, monkeypatch, exc):
    history, _ = small_history()
    old = tmp_path / "trace.json"
    old.write_text('{"old": true}')
    _fail_midway(monkeypatch, exc)
    expected = ExportError if isinstance(exc, OSError) else RuntimeError
    with pytest.raises(expected) as info:
        export_run(history, tmp_path, ["trace"])
    assert old.read_text() == '{"old": true}'
    assert leftovers(tmp_path) == []
    if expected is ExportError:
        assert "trace.json" in str(info.value) and "No space left" in str(info.value)
    monkeypatch.undo()
    export_run(history, tmp_path, ["trace"])  # a complete file replaces the old one
    assert json.loads(old.read_text())["traceEvents"]


def test_unwritable_folder_is_a_clear_error(tmp_path):
    history, _ = small_history()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ExportError, match=r"cannot write .*a-file/sub/trace\.json.*folder you can"):
        export_run(history, blocker / "sub", ["trace"])


@pytest.fixture(scope="module")
def run_folders(tmp_path_factory):
    """A precise and a plain run, saved as run folders."""
    base = tmp_path_factory.mktemp("runs")
    precise, summary = run("mlp", steps=3, precise=True)
    plain, _ = run("mlp", steps=3)
    write_history(precise, base / "precise")
    write_history(plain, base / "plain")
    return base, summary


def test_cli_exports_a_saved_precise_run(run_folders, capsys):
    base, summary = run_folders
    folder = base / "precise"
    assert memlens(["export", str(folder), "--format", "all", "--out", str(base / "x")]) == 0
    out = capsys.readouterr().out
    for name in ("snapshot.pickle", "trace.json", "memory_timeline.json"):
        assert f"wrote {base / 'x' / name}" in out
    from tests.core.viewer_model import viewer_peak

    snap = pickle.loads((base / "x" / "snapshot.pickle").read_bytes())
    assert viewer_peak(snap, len(snap["device_traces"]) - 1) == summary.peak_bytes
    # default --out is the run folder itself
    assert memlens(["export", str(folder), "-f", "timeline"]) == 0
    assert (folder / "memory_timeline.json").is_file()


def test_cli_plain_run_gets_trace_and_timeline_and_is_told_why(run_folders, capsys):
    folder = run_folders[0] / "plain"
    assert memlens(["export", str(folder)]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "trace.json" in captured.out
    assert "snapshot.pickle not written" in captured.err and "--precise" in captured.err
    assert not (folder / "snapshot.pickle").exists()
    assert memlens(["export", str(folder), "--format", "snapshot"]) == 2
    assert "cannot write snapshot.pickle" in capsys.readouterr().err


def test_cli_bad_folder_or_arguments_exit_2(run_folders, tmp_path, capsys):
    assert memlens(["export", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert memlens(["export", str(tmp_path)]) == 2
    assert "not a memlens run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        memlens(["export", str(run_folders[0] / "plain"), "--format", "pdf"])
    assert info.value.code == 2
    assert "unknown export format 'pdf'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        memlens(["export", str(run_folders[0] / "plain"), "--max-rows", "-1"])
    assert info.value.code == 2
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert memlens(["export", str(run_folders[0] / "plain"), "--out", str(blocker)]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_cli_module_imports_nothing_heavy():
    code = ("import sys, memlens.cli.export; "
            "print(sorted(m for m in ('numpy', 'torch', 'PySide6') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[2]).stdout
    assert out.strip() == "[]"


def test_empty_and_failed_at_first_step_runs_still_give_valid_files(tmp_path):
    from memlens.core.records import RunEvent
    from tests.core.export_histories import META, sample

    empty = RunHistory()
    empty.on_start(META)
    written = export_run(empty, tmp_path / "empty", "all")
    assert [p.name for p in written] == ["trace.json", "memory_timeline.json"]
    assert json.loads(written[1].read_text()) == [[], []]
    failed = RunHistory()
    failed.on_start(META)
    failed.add_sample(sample(0, "start", 0.5, params=100))
    failed.on_allocations([(10, 0, 0, 0x1000, 64, 0, 0, 0, "")])
    failed.on_event(RunEvent(0, 0.7, "error", key="OOM", phase="forward", message="boom"))
    written = export_run(failed, tmp_path / "failed", "all")
    trace = json.loads(written[1].read_text())["traceEvents"]
    assert [e["name"] for e in trace if e["ph"] == "i"] == ["error in forward: OOM"]
    assert json.loads(written[2].read_text()) == [[10], [[0, 64, 0, 0, 0, 0, 0, 0, 0]]]
    snap = pickle.loads(written[0].read_bytes())
    assert [e["action"] for e in snap["device_traces"][-1]] == ["alloc", "snapshot"]
