"""A run folder's CSV lines: the native formatter (core/native/csv_rows.h, no GIL held) writes
what the row codecs write, cell for cell, and what the csv module makes of their cells; what
it cannot read or write so goes to the codecs, which write or raise as they do; and a
watched run's files are the same with the native helpers and without them."""

from __future__ import annotations

import csv
import io
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import memlens
import memlens.core.native
from memlens.core.history import SAMPLE_COLUMNS, STEP_COLUMNS
from memlens.core.records import SAMPLE_PHASES
from memlens.core.runfolder import format as fmt
from memlens.core.runfolder.format import memory_row, memory_text, steps_row, steps_text
from tests.core.native_marks import native, needs_native


def _csv_lines(cell_rows: list[list[str]]) -> str:
    """What the csv module writes for these cells (the files' rows were written so)."""
    out = io.StringIO()
    csv.writer(out).writerows(cell_rows)
    return out.getvalue()


def _value(rng: random.Random, as_int: bool):
    """A value as a record gives one: ints, floats of every size, None, NaN, -0.0, bools,
    numpy floats (a float subclass); infinity only where a float is written (an integer
    column's raises in the codec: see the fallback's test)."""
    choices = [None, math.nan, -0.0, 0.0, True, 1e-5, 0.1, 2.5e-12,
               rng.randint(0, 10**15), -rng.randint(0, 10**6), float(rng.randint(0, 10**12)),
               rng.random() * 10 ** rng.randint(-12, 18), -rng.random() * 10 ** rng.randint(-3, 9),
               np.float64(rng.random() * 1e4)]
    if not as_int:
        choices += [math.inf, -math.inf]
    return rng.choice(choices)


def _step_rows(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    kinds = fmt._STEP_AS_INT
    return [tuple(_value(rng, as_int) for as_int in kinds) for _ in range(n)]


def _memory_rows(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [(rng.randint(0, 10**6), float(rng.randrange(len(SAMPLE_PHASES))), rng.random(),
             rng.choice([rng.random() * 1e4, 0.0, 1e-7, 123.4567894, math.nan]),
             *(_value(rng, True) for _ in SAMPLE_COLUMNS[4:]))
            for _ in range(n)]


def test_the_codecs_lines_are_what_the_csv_module_writes_of_their_cells(monkeypatch):
    monkeypatch.setattr(fmt, "loaded_native", lambda: None)  # the codecs alone
    steps, memory = _step_rows(300, 1), _memory_rows(300, 2)
    assert steps_text(steps) == _csv_lines([steps_row(r) for r in steps])
    assert memory_text(memory) == _csv_lines([memory_row(r) for r in memory])
    assert steps_text([]) == memory_text([]) == ""


@needs_native
@pytest.mark.parametrize("seed", range(4))
def test_native_lines_are_the_codecs_lines(seed):
    steps, memory = _step_rows(500, seed), _memory_rows(500, 100 + seed)
    got_steps = native.format_rows(steps, fmt._STEP_KINDS, SAMPLE_PHASES)
    got_memory = native.format_rows(memory, fmt._MEMORY_KINDS, SAMPLE_PHASES)
    assert got_steps is not None and got_memory is not None  # it read every one of them
    assert got_steps.splitlines() == [",".join(steps_row(r)) for r in steps]
    assert got_memory.splitlines() == [",".join(memory_row(r)) for r in memory]
    assert got_steps == _csv_lines([steps_row(r) for r in steps])


@needs_native
@pytest.mark.parametrize("row, reason", [
    ((1,) * (len(STEP_COLUMNS) - 1), "a row one value short"),
    ((math.inf,) + (1,) * (len(STEP_COLUMNS) - 1), "infinity in an integer column"),
    ((2.0**64,) + (1,) * (len(STEP_COLUMNS) - 1), "a float past 2**63 in an integer column"),
    ((10**30,) + (1,) * (len(STEP_COLUMNS) - 1), "an integer past 2**63"),
    ((np.int64(3),) + (1,) * (len(STEP_COLUMNS) - 1), "a numpy integer"),
    (("7",) + (1,) * (len(STEP_COLUMNS) - 1), "a string"),
])
def test_what_the_native_formatter_cannot_write_goes_to_the_codec(row, reason):
    assert native.format_rows([row], fmt._STEP_KINDS, SAMPLE_PHASES) is None, reason
    try:
        expected = ",".join(steps_row(row)) + "\r\n"
    except (ValueError, OverflowError, TypeError) as exc:  # the codec's own error, raised
        with pytest.raises(type(exc)):
            steps_text([row])
    else:
        assert steps_text([row]) == expected


@needs_native
def test_a_phase_index_out_of_range_goes_to_the_codec():
    row = (1, -1.0, 0.0, 0.5, *([1] * (len(SAMPLE_COLUMNS) - 4)))  # -1: Python's last phase
    assert native.format_rows([row], fmt._MEMORY_KINDS, SAMPLE_PHASES) is None
    assert memory_text([row]).split(",")[1] == SAMPLE_PHASES[-1]


@needs_native
def test_a_time_too_long_for_the_native_buffer_goes_to_the_codec():
    """"%.6f" writes every integer digit: a time past 1e40 s is the codec's to write (the
    native buffer is 64 characters); one just under it is written natively, alike."""
    rest = [1] * (len(SAMPLE_COLUMNS) - 4)
    huge, large = (1, 2.0, 0.0, 1e300, *rest), (1, 2.0, 0.0, 9.9e39, *rest)
    assert native.format_rows([huge], fmt._MEMORY_KINDS, SAMPLE_PHASES) is None
    assert memory_text([huge]) == ",".join(memory_row(huge)) + "\r\n"
    assert native.format_rows([large], fmt._MEMORY_KINDS, SAMPLE_PHASES) == \
        ",".join(memory_row(large)) + "\r\n"


def _watched_files(folder: Path) -> dict[str, list[list[str]]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    with memlens.watch(out=folder, quiet=True, detail=3):
        for _ in range(7):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return {name: list(csv.reader((folder / name).open(newline="")))
            for name in ("steps.csv", "memory.csv")}


@needs_native
def test_a_watched_runs_files_have_the_same_cells_without_the_native_formatter(
        tmp_path, monkeypatch):
    with_native = _watched_files(tmp_path / "native")
    monkeypatch.setattr(fmt, "loaded_native", lambda: None)
    without = _watched_files(tmp_path / "python")
    for name, rows in with_native.items():
        other = without[name]
        assert rows[0] == other[0] and len(rows) == len(other) > 7
        # every cell alike but the times and the process's heap and RSS, which differ
        # from run to run
        varies = {i for i, c in enumerate(rows[0])
                  if c.endswith(("_ms", "time_s", "heap_bytes", "rss_bytes"))}
        assert [[c for i, c in enumerate(r) if i not in varies] for r in rows[1:]] == \
            [[c for i, c in enumerate(r) if i not in varies] for r in other[1:]]
