"""Damaged run folders: `export` exits 2 naming the file and what is wrong, never a traceback
and never the file's own text; a BOM is read; atomic writes leave the umask alone."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

import main as memlens_main
from memlens.core.history import RunHistory
from memlens.core.runfolder.atomic import atomic_write_text
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.reader import load_run
from memlens.core.runfolder.writer import RunWriter
from memlens.core.sinks import FanOut
from tests.core.helpers import run, tiny_config


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A whole precise run folder, streamed as the CLI streams it."""
    from memlens.core.loop import run_training

    folder = tmp_path_factory.mktemp("base") / "run"
    cfg = tiny_config("mlp", steps=4, precise=True)
    writer = RunWriter(folder, precise=True)
    run_training(cfg, sink=FanOut(RunHistory(), writer))
    return folder


def damaged(base: Path, tmp_path: Path, change) -> Path:
    folder = tmp_path / "damaged"
    shutil.copytree(base, folder)
    change(folder)
    return folder


def edit_json(key, value):
    def change(folder: Path) -> None:
        doc = json.loads((folder / "run.json").read_text())
        doc[key] = value
        (folder / "run.json").write_text(json.dumps(doc))
    return change


def edit_cell(name: str, line: int, column: str, value: str):
    def change(folder: Path) -> None:
        lines = (folder / name).read_text().splitlines()
        header = lines[0].split(",")
        cells = lines[line - 1].split(",")
        cells[header.index(column)] = value
        lines[line - 1] = ",".join(cells)
        (folder / name).write_text("\n".join(lines) + "\n")
    return change


def negative_shape(folder: Path) -> None:
    data = bytearray((folder / "allocations.npy").read_bytes())
    at = data.index(b"'shape': (") + len(b"'shape': (")
    end = data.index(b",)", at)
    data[at:end] = b"-5".ljust(end - at)
    (folder / "allocations.npy").write_bytes(bytes(data))


def deep_json(folder: Path) -> None:
    depth = 200_000
    (folder / "run.json").write_text('{"format": "memlens-run", "x": ' + "[" * depth
                                     + "]" * depth + "}")


CASES = {
    "config is text": (edit_json("config", "mlp"), "run.json", "'config'"),
    "environment is a list": (edit_json("environment", [1, 2]), "run.json", "'environment'"),
    "events is text": (edit_json("events", "none"), "run.json", "'events'"),
    "an event is a number": (edit_json("events", [3]), "run.json", "event 0"),
    "an event's step is text": (
        edit_json("events", [{"step": "a", "time_s": 0.0, "kind": "info"}]), "run.json",
        "'step'"),
    "an event's time is a list": (
        edit_json("events", [{"step": 1, "time_s": [], "kind": "info"}]), "run.json",
        "'time_s'"),
    "an event's kind is a number": (
        edit_json("events", [{"step": 1, "time_s": 0.0, "kind": 5}]), "run.json", "'kind'"),
    "nested too deeply": (deep_json, "run.json", "nested too deeply"),
    "NaN step": (edit_cell("steps.csv", 2, "step", "nan"), "steps.csv", "'step'"),
    "infinite bytes": (edit_cell("steps.csv", 3, "peak_bytes", "inf"), "steps.csv",
                       "line 3, column 'peak_bytes'"),
    "1e308 bytes": (edit_cell("steps.csv", 2, "allocated_bytes", "1e308"), "steps.csv",
                    "'allocated_bytes'"),
    "1e308 in memory.csv": (edit_cell("memory.csv", 3, "params_bytes", "1e308"), "memory.csv",
                            "'params'"),
    "infinite step in memory.csv": (edit_cell("memory.csv", 2, "step", "inf"), "memory.csv",
                                    "'step'"),
    "negative allocations shape": (negative_shape, "allocations.npy", "damaged"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_damaged_folder_exits_2_naming_the_file_and_the_fault(capsys, base, tmp_path, name):
    change, file, fault = CASES[name]
    folder = damaged(base, tmp_path, change)
    code = memlens_main.main(["export", str(folder), "--format", "all",
                              "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(folder / file) in err and fault in err
    assert "Traceback" not in err


def test_load_run_raises_only_run_folder_errors_for_every_case(base, tmp_path):
    for i, (change, _file, _fault) in enumerate(CASES.values()):
        folder = damaged(base, tmp_path / str(i), change)
        with pytest.raises(RunFolderError):
            load_run(folder)


def test_a_csv_with_a_utf8_bom_is_read(base, tmp_path):
    def add_bom(folder: Path) -> None:
        for name in ("steps.csv", "memory.csv"):
            (folder / name).write_bytes(b"\xef\xbb\xbf" + (folder / name).read_bytes())

    plain = load_run(base)
    history = load_run(damaged(base, tmp_path, add_bom))
    assert np.array_equal(history.steps.rows(), plain.steps.rows(), equal_nan=True)
    assert np.array_equal(history.samples.rows(), plain.samples.rows(), equal_nan=True)


def test_a_cut_header_lists_the_expected_columns_once(base, tmp_path):
    def cut(folder: Path) -> None:
        lines = (folder / "steps.csv").read_text().splitlines()
        lines[0] = "step,time_s,lo"
        (folder / "steps.csv").write_text("\n".join(lines) + "\n")

    with pytest.raises(RunFolderError) as info:
        load_run(damaged(base, tmp_path, cut))
    text = str(info.value)
    from memlens.core.runfolder.format import STEPS_HEADER

    assert f"cut short after 3 of {len(STEPS_HEADER)} columns" in text
    assert text.count("grad_norm") == 1 and text.count("eval_loss") == 1


def test_messages_never_repeat_a_linked_files_text(base, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-first-line,hunter2\n1,2\n")

    def link(folder: Path) -> None:
        for name in ("steps.csv", "allocation_frames.jsonl"):
            os.unlink(folder / name)
            os.symlink(secret, folder / name)

    folder = damaged(base, tmp_path, link)
    with pytest.raises(RunFolderError) as info:
        load_run(folder)
    assert "TOPSECRET" not in str(info.value) and "hunter2" not in str(info.value)
    os.unlink(folder / "steps.csv")
    shutil.copy(base / "steps.csv", folder / "steps.csv")
    with pytest.raises(RunFolderError) as info:  # now the frames file is the odd one
        load_run(folder)
    assert "allocation_frames.jsonl" in str(info.value) and "TOPSECRET" not in str(info.value)


def test_atomic_write_gives_a_plain_files_mode_without_touching_the_umask(tmp_path, monkeypatch):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")

    def no_umask(mask):
        raise AssertionError("os.umask is process-wide: another thread's files race with it")

    monkeypatch.setattr(os, "umask", no_umask)
    atomic_write_text(tmp_path / "atomic.txt", "x")
    mode = stat.S_IMODE((tmp_path / "atomic.txt").stat().st_mode)
    assert mode == stat.S_IMODE(plain.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_whole_run_still_loads(base):
    history = load_run(base)
    fresh, _summary = run("mlp", steps=4, precise=True)
    assert len(history.steps) == len(fresh.steps) == 4
    assert len(history.allocs) > 0
