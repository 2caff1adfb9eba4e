"""The run history's tables: rows kept in fixed blocks, read back across block edges."""

from __future__ import annotations

import threading

import numpy as np

from memlens.core.history import ColumnTable, RunHistory
from memlens.core.records import MemorySample


def test_rows_and_columns_read_back_across_block_edges():
    table = ColumnTable(("a", "b"), block_rows=16)
    expected = []
    for i in range(40):
        table.append((i, -i))
        expected.append((i, -i))
    more = np.arange(100.0).reshape(-1, 2)
    table.extend(more)
    expected = np.vstack([np.array(expected, dtype=np.float64), more])
    assert len(table) == 90
    for start, stop in [(0, None), (5, 17), (16, 32), (15, 16), (39, 41), (0, 0), (89, 500),
                        (95, None)]:
        np.testing.assert_array_equal(table.rows(start, stop), expected[start:stop])
        np.testing.assert_array_equal(table.column("b", start, stop), expected[start:stop, 1])


def test_growing_adds_blocks_and_never_moves_stored_rows():
    table = ColumnTable(("a",), block_rows=16)
    table.append((1.0,))
    assert len(table) == 1  # a reader looking stores what was queued
    first = table._blocks[0]
    table.extend(np.arange(1000.0)[:, None])
    assert table._blocks[0] is first  # appending copied nothing already stored
    assert table.nbytes == 63 * 16 * 8  # 1,001 rows in 63 blocks: slack under one block
    held = table.rows(0, 10)
    table.clear()
    table.append((7.0,))
    assert held[0, 0] == 1.0 and table.rows()[0, 0] == 7.0


def test_a_reader_sees_whole_rows_while_the_writer_appends():
    table = ColumnTable(("i", "twice"), block_rows=64)
    done = threading.Event()

    def write() -> None:
        for i in range(20_000):
            table.append((i, 2 * i))
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    seen = 0
    while not done.is_set() or seen < len(table):
        rows = table.rows(seen)
        assert (rows[:, 1] == 2 * rows[:, 0]).all()
        assert (rows[:, 0] == np.arange(seen, seen + len(rows))).all()
        seen += len(rows)
    writer.join()
    assert seen == 20_000


def test_queued_rows_are_converted_once_and_seen_by_every_read():
    seen: list = []

    def convert(item):
        seen.append(item)
        return (item, item * 10)

    table = ColumnTable(("a", "b"), block_rows=16, convert=convert)
    for i in range(5):
        table.append(i)
    assert seen == []  # nothing converted on the writer's side yet
    np.testing.assert_array_equal(table.column("b"), [0, 10, 20, 30, 40])
    table.append(5)
    assert table.rows(5)[0].tolist() == [5.0, 50.0]
    assert seen == [0, 1, 2, 3, 4, 5]
    # a writer that nobody reads still stores rows in batches: the queue stays bounded
    for i in range(6, 6 + 3 * ColumnTable.FLUSH_ROWS):
        table.append(i)
    assert len(table._pending) < ColumnTable.FLUSH_ROWS
    assert len(table) == 6 + 3 * ColumnTable.FLUSH_ROWS


def test_a_live_reader_leaves_a_fresh_queue_to_the_writer(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("memlens.core.history.time.monotonic", lambda: clock[0])
    table = ColumnTable(("a",), block_rows=16, convert=lambda i: (i,))
    for i in range(3):
        table.append(i)
    assert len(table.rows(0, 16, live=True)) == 0  # fresh: the writer will batch it
    clock[0] += ColumnTable.LIVE_LAG_S * 0.9
    assert len(table.rows(0, 16, live=True)) == 0
    clock[0] += ColumnTable.LIVE_LAG_S * 0.2  # the writer is slow: the reader converts
    assert table.rows(0, 16, live=True)[:, 0].tolist() == [0.0, 1.0, 2.0]
    table.append(3)
    assert len(table.rows(3, 16, live=True)) == 0
    assert table.rows(3, 16)[:, 0].tolist() == [3.0]  # a plain read sees every row


def test_the_end_of_a_run_stores_every_queued_row_for_the_last_live_pull(monkeypatch):
    monkeypatch.setattr("memlens.core.history.time.monotonic", lambda: 5.0)
    history = RunHistory()
    history.add_sample(MemorySample(0, "start", 0.0, 1, 0, 0, 0, 0))
    assert len(history.samples.rows(0, None, live=True)) == 0
    history.on_finish({})
    assert len(history.samples.rows(0, None, live=True)) == 1


def test_an_alloc_block_reads_its_stacks_from_the_frame_column():
    from memlens.core.history import ALLOC_COLUMNS
    from memlens.core.records import ALLOC_FRAME_COLUMN, AllocBlock

    assert ALLOC_COLUMNS.index("frame") == ALLOC_FRAME_COLUMN
    table = np.zeros((2, len(ALLOC_COLUMNS)))
    table[:, ALLOC_COLUMNS.index("bytes")] = [512, 64]
    table[:, ALLOC_FRAME_COLUMN] = [1, -1]
    block = AllocBlock(table, ["a.py:1:f", "b.py:2:g"])
    assert block.frame_texts() == ["b.py:2:g", ""]
    assert [r[ALLOC_COLUMNS.index("bytes")] for r in block.tuples()] == [512, 64]
    assert [r[-1] for r in block.tuples()] == ["b.py:2:g", ""]


def test_a_recorders_shared_frames_map_to_the_same_texts_block_after_block():
    """The native recorder's blocks share one growing list of stack texts; a consumer maps
    their stack ids with a table kept between blocks. Each row must name the text it named
    in the block (read with frame_texts, which maps nothing), the consumer's frames must be
    each distinct text once, and a second consumer mapping the same blocks without the
    table must end with the same frames and rows."""
    from memlens.core.history import ALLOC_COLUMNS
    from memlens.core.records import ALLOC_FRAME_COLUMN, AllocBlock

    rng = np.random.default_rng(0)
    frames: list[str] = []  # the recorder's, grown as new stacks appear
    kept, plain = RunHistory(), RunHistory()
    texts = []
    for _ in range(12):
        for _ in range(int(rng.integers(0, 4))):  # a text may repeat under a new stack id
            frames.append(f"f{int(rng.integers(0, 8))}.py:1:g")
        table = np.zeros((40, len(ALLOC_COLUMNS)))
        table[:, ALLOC_FRAME_COLUMN] = rng.integers(-1, len(frames), 40) if frames else -1
        shared = AllocBlock(table, frames, shared=True)
        texts += shared.frame_texts()
        kept.on_allocations(shared)
        plain.on_allocations(AllocBlock(table, list(frames)))  # a fresh list each block
    for history in (kept, plain):
        column = history.allocs.column("frame").astype(int)
        named = ["" if i < 0 else history.frames[i] for i in column]
        assert named == texts
        assert sorted(history.frames) == sorted(set(texts))
    assert kept.frames == plain.frames
    assert np.array_equal(kept.allocs.column("frame"), plain.allocs.column("frame"))
