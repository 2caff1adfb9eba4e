"""The run folder's allocations.npy, the on-request allocations.csv, and Export's run files
(copied from the folder the run streamed, written from the history otherwise)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from memlens.__main__ import main as memlens
from memlens.core.history import ALLOC_COLUMNS
from memlens.core.records import MEMORY_CATEGORIES, SAMPLE_PHASES
from memlens.core.runfolder.allocations import ALLOC_DTYPE, HEADER_BYTES, AllocationsStream
from memlens.core.runfolder.format import (
    ALLOCATIONS_CSV,
    ALLOCATIONS_NPY,
    FRAMES_JSONL,
    MEMORY_CSV,
    RUN_JSON,
    STEPS_CSV,
    RunFolderError,
)
from memlens.core.runfolder.history_files import export_run_files, write_history
from memlens.core.runfolder.reader import load_run
from memlens.core.runfolder.writer import RunWriter
from tests.core.helpers import run

RUN_FILES = (STEPS_CSV, MEMORY_CSV, ALLOCATIONS_NPY, FRAMES_JSONL, RUN_JSON)


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    """A precise run streamed by RunWriter, and the history that ran beside it."""
    folder = tmp_path_factory.mktemp("streamed") / "run"
    history, _ = run("mlp", steps=3, precise=True, sink=RunWriter(folder, precise=True))
    return folder, history


def csv_rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def by_column(recs: np.ndarray) -> list[tuple]:
    """Records as tuples in ALLOC_COLUMNS order (the file orders fields by offset)."""
    return list(zip(*(recs[c].tolist() for c in ALLOC_COLUMNS), strict=True))


def test_streamed_allocations_load_back_exactly(streamed):
    folder, history = streamed
    assert not (folder / ALLOCATIONS_CSV).exists()  # text only on request
    back = load_run(folder)
    assert len(history.allocs) > 100
    np.testing.assert_array_equal(back.allocs.rows(), history.allocs.rows())
    assert back.frames == history.frames
    recs = np.load(folder / ALLOCATIONS_NPY)  # a plain .npy any numpy reads
    assert set(recs.dtype.names) == set(ALLOC_COLUMNS) and len(recs) == len(history.allocs)
    doc = json.loads((folder / RUN_JSON).read_text())
    assert doc["allocations"]["file"] == ALLOCATIONS_NPY
    assert doc["allocations"]["codes"]["category"] == list(MEMORY_CATEGORIES)


def test_allocations_csv_holds_what_the_binary_table_holds(streamed, tmp_path):
    folder, _ = streamed
    assert memlens(["export", str(folder), "-f", "allocations", "--out", str(tmp_path)]) == 0
    rows = csv_rows(tmp_path / ALLOCATIONS_CSV)
    recs = np.load(folder / ALLOCATIONS_NPY)
    frames = [json.loads(line) for line in (folder / FRAMES_JSONL).read_text().splitlines()]
    assert len(rows) == len(recs)
    for row, rec in zip(rows, by_column(recs), strict=True):
        t_us, action, storage, addr, nbytes, category, step, phase, frame = rec
        assert row == {"t_us": str(t_us), "action": ("alloc", "free")[action],
                       "storage": str(storage), "addr": str(addr), "bytes": str(nbytes),
                       "category": MEMORY_CATEGORIES[category], "step": str(step),
                       "phase": SAMPLE_PHASES[phase], "frames": frames[frame]}
    # "all" is every viewer format, not the text table
    assert memlens(["export", str(folder), "--out", str(tmp_path / "all")]) == 0
    assert not (tmp_path / "all" / ALLOCATIONS_CSV).exists()


def test_export_copies_the_streamed_files_byte_for_byte(streamed, tmp_path):
    folder, history = streamed
    copied: list[str] = []
    written = export_run_files(history, tmp_path / "out", folder, copied=copied)
    assert sorted(copied) == sorted(RUN_FILES)
    assert sorted(p.name for p in written) == sorted(RUN_FILES)
    for name in RUN_FILES:
        assert (tmp_path / "out" / name).read_bytes() == (folder / name).read_bytes(), name
    # exporting into the run's own folder leaves its files as they are
    before = {n: (folder / n).stat().st_mtime_ns for n in RUN_FILES}
    copied = []
    export_run_files(history, folder, folder, copied=copied)
    assert sorted(copied) == sorted(RUN_FILES)
    assert {n: (folder / n).stat().st_mtime_ns for n in RUN_FILES} == before


def test_without_a_run_folder_the_same_files_are_written(streamed, tmp_path):
    folder, history = streamed
    copied: list[str] = []
    export_run_files(history, tmp_path, None, copied=copied)
    assert copied == []
    for name in (STEPS_CSV, MEMORY_CSV, ALLOCATIONS_NPY, FRAMES_JSONL):
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name


def _copy_folder(src, dst):
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())


def test_files_that_do_not_match_the_history_are_written_from_it(streamed, tmp_path):
    folder, history = streamed
    src = tmp_path / "src"
    _copy_folder(folder, src)
    steps = (src / STEPS_CSV).read_bytes()
    (src / STEPS_CSV).write_bytes(steps[: len(steps) - 7])  # a torn last line
    lines = (src / MEMORY_CSV).read_bytes().splitlines(keepends=True)
    (src / MEMORY_CSV).write_bytes(b"".join(lines[:-1]))  # one sample behind the history
    data = bytearray((src / ALLOCATIONS_NPY).read_bytes())
    data[-1] ^= 0xFF  # the last event differs
    (src / ALLOCATIONS_NPY).write_bytes(bytes(data))
    doc = json.loads((src / RUN_JSON).read_text())
    doc["summary"] = None  # a run still going
    (src / RUN_JSON).write_text(json.dumps(doc))
    copied: list[str] = []
    export_run_files(history, tmp_path / "out", src, copied=copied)
    assert copied == []
    back = load_run(tmp_path / "out")
    np.testing.assert_array_equal(back.steps.rows(), load_run(folder).steps.rows())
    assert len(back.samples) == len(history.samples)
    np.testing.assert_array_equal(back.allocs.rows(), history.allocs.rows())
    assert json.loads((tmp_path / "out" / RUN_JSON).read_text())["summary"] is not None


def test_a_run_that_stopped_mid_way_keeps_every_block_it_flushed(tmp_path):
    rows = [(10 * i, i % 2, i // 2, 4096 * i, 64, 3, 0, 2, f"train.py:{i % 3}:f")
            for i in range(50)]
    stream = AllocationsStream(tmp_path)
    stream.append(rows[:20])
    stream.append([(float(r[0]), *r[1:]) for r in rows[20:30]])  # numbers of any kind
    stream.append(rows[30:])
    # no close(): the process died; what was flushed is on disk
    recs = np.load(tmp_path / ALLOCATIONS_NPY)
    assert len(recs) == 50
    assert [r[:-1] for r in by_column(recs)] == [r[:-1] for r in rows]
    frames = [json.loads(line) for line in (tmp_path / FRAMES_JSONL).read_text().splitlines()]
    assert [frames[f] for f in recs["frame"]] == [r[-1] for r in rows]
    stream.close()


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[: HEADER_BYTES + (len(d) - HEADER_BYTES) // 2], "cut short"),
    (lambda d: b"not numpy at all" + d[16:], "not a .npy file"),
    (lambda d: d[:HEADER_BYTES] + b"\x07" * (len(d) - HEADER_BYTES), "damaged"),
])
def test_a_damaged_allocations_file_is_a_clear_message(streamed, tmp_path, damage, message):
    folder, _ = streamed
    bad = tmp_path / "bad"
    _copy_folder(folder, bad)
    (bad / ALLOCATIONS_NPY).write_bytes(damage((bad / ALLOCATIONS_NPY).read_bytes()))
    with pytest.raises(RunFolderError, match=message) as info:
        load_run(bad)
    assert ALLOCATIONS_NPY in str(info.value)
    assert memlens(["export", str(bad)]) == 2  # the CLI says it, no traceback


def test_frames_file_that_is_missing_or_too_short_is_a_clear_message(streamed, tmp_path):
    folder, _ = streamed
    bad = tmp_path / "bad"
    _copy_folder(folder, bad)
    (bad / FRAMES_JSONL).write_text('"only one frame"\n')
    with pytest.raises(RunFolderError, match=r"frame .* holds 1"):
        load_run(bad)
    (bad / FRAMES_JSONL).unlink()
    with pytest.raises(RunFolderError, match="missing"):
        load_run(bad)


def test_write_history_round_trips_a_loaded_run(streamed, tmp_path):
    folder, _ = streamed
    write_history(load_run(folder), tmp_path)
    for name in (STEPS_CSV, MEMORY_CSV, ALLOCATIONS_NPY, FRAMES_JSONL):
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name
    assert np.load(tmp_path / ALLOCATIONS_NPY).dtype == ALLOC_DTYPE


def test_allocations_csv_is_what_the_csv_module_writes(tmp_path):
    from memlens.core.exports.allocations_csv import write_allocations_csv
    from memlens.core.history import RunHistory
    from memlens.core.runfolder.format import ALLOC_HEADER, alloc_row

    frames = ["", 'C:\\odd, "quoted"\\train.py:12:f|x.py:1:g', "ünï\ncode.py:3:h", "a.py:7:k"]
    rows = [(t * 997, t % 2, t // 2, 0x7F00_0000_0000 + 4096 * t, 64 * t, t % 5, t // 3,
             t % 6, frames[t % 4]) for t in range(300)]
    history = RunHistory()
    history.on_allocations(rows)
    path = write_allocations_csv(history, tmp_path / ALLOCATIONS_CSV)
    expected = io.StringIO(newline="")
    writer = csv.writer(expected)
    writer.writerow(ALLOC_HEADER)
    writer.writerows(alloc_row(r[:-1], r[-1]) for r in rows)
    assert path.read_bytes() == expected.getvalue().encode()


def test_torn_last_lines_are_dropped_and_a_bad_value_is_named(streamed, tmp_path):
    folder, history = streamed
    from memlens.core.runfolder.format import STEPS_HEADER, parse_numbers

    # whole files take numpy's one-pass reader, not the row-by-row one
    assert parse_numbers((folder / STEPS_CSV).read_bytes(), STEPS_HEADER) is not None
    torn = tmp_path / "torn"
    _copy_folder(folder, torn)
    for name in (STEPS_CSV, MEMORY_CSV):
        with open(torn / name, "ab") as fh:
            fh.write(b"3,0.5,1.2")  # the crash came mid-row
    back = load_run(torn)
    np.testing.assert_array_equal(back.steps.rows(), load_run(folder).steps.rows())
    np.testing.assert_array_equal(back.samples.rows(), load_run(folder).samples.rows())
    assert len(back.samples) == len(history.samples)
    lines = (folder / MEMORY_CSV).read_bytes().split(b"\r\n")
    lines[3] = lines[3].replace(b",forward,", b",sideways,")  # file line 4
    (torn / MEMORY_CSV).write_bytes(b"\r\n".join(lines))
    with pytest.raises(RunFolderError, match=r"memory\.csv: line 4 is not valid.*phase"):
        load_run(torn)
