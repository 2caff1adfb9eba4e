"""Writing a run folder as the run goes: one writer for every producer of a run.

`RunWriter` is a run sink whose calls return at once: the records go to a thread of the
writer's own, which turns them into text and files a batch at a time (everything queued
when it wakes), flushing each file once a batch. A recording inside a user's training
thread (watch) and the lab's loop spend no time on disk, and a step's rows reach the files
as soon as that thread runs (the training thread releases the GIL in torch's kernels).
That thread's Python is not free, though: holding the GIL while the training thread's op
runs, it makes the training thread wait for it after the op (steps overlapping a 1.07 ms
batch of rows took 1.1 ms longer, 35 us a 2.6 ms step; yielding every 50 us changed
nothing). So it keeps its Python short: the rows' text is formatted without the GIL where
the native helpers are loaded (format.steps_text). The calls keep their order: a step's
samples before its row, an event after the rows before it.

A write that fails there (a full disk) stops the writes, the files ending at the last good
batch; the next call raises that error (an OSError), once, for the producer's guard
(core.sinks.GuardedSink, core.run_guard.WriteGuard) to report, and `failed` holds it.
`flush()` waits until everything posted is written; `on_finish` writes the summary and
closes: nothing posted is lost.

The folder is claimed as its files are made: run.json, steps.csv and memory.csv are created
exclusively and never through a link (runfolder.claim), so a folder that holds a run is
never written again, and of two writers racing for one folder one wins.
"""

from __future__ import annotations

import csv
import json
import os
import queue
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from memlens.core.history import RunHistory, sample_values, step_values
from memlens.core.records import RunEvent, samples_of
from memlens.core.runfolder.allocations import AllocationsStream
from memlens.core.runfolder.allocations import describe as describe_allocations
from memlens.core.runfolder.atomic import ExportError, atomic_write_text, rewrite_in_place
from memlens.core.runfolder.claim import create_new, create_new_text
from memlens.core.runfolder.format import (
    CUDA_SNAPSHOT,
    MEMORY_CSV,
    MEMORY_HEADER,
    RUN_FILE_NAMES,
    RUN_FORMAT,
    RUN_FORMAT_VERSION,
    RUN_JSON,
    STEPS_CSV,
    STEPS_HEADER,
    graph_summary,
    memory_text,
    steps_text,
)

JSON_EVERY_S = 2.0  # run.json rewritten at most this often for steps alone (events: at once)


class FolderFiles:
    """The run folder's files, written on the writer's thread (RunWriter)."""

    def __init__(self, folder: Path, precise: bool, meta: dict | None,
                 history: RunHistory | None) -> None:
        self.folder = folder
        self._history = history
        self._doc: dict[str, Any] = {"format": RUN_FORMAT, "version": RUN_FORMAT_VERSION,
                                     "events": [], "graphs": [], "summary": None}
        if precise:
            self._doc["allocations"] = describe_allocations()
        self._doc.update(meta or {})
        self._fhs: list = []
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # run.json first: the exclusive create that claims the folder
            create_new_text(folder / RUN_JSON, self._json())
            self._steps_fh = self._open(STEPS_CSV)
            self._mem_fh = self._open(MEMORY_CSV)
            self._allocs = AllocationsStream(folder) if precise else None
        except OSError as exc:
            self.close()
            raise _folder_error(folder, exc) from exc
        except BaseException:  # FolderTaken: the folder holds a run
            self.close()
            raise
        csv.writer(self._steps_fh).writerow(STEPS_HEADER)  # (the rows: format's *_text)
        csv.writer(self._mem_fh).writerow(MEMORY_HEADER)
        self._last_json = time.monotonic()
        self.flush()

    def _open(self, name: str):
        fh = open(create_new(self.folder / name), "w", newline="", encoding="utf-8")  # noqa: SIM115
        self._fhs.append(fh)
        return fh

    # --- records ---------------------------------------------------------------------------
    def on_start(self, meta: dict) -> None:
        self._doc.update(meta)
        self._write_json()

    def on_samples(self, items: list) -> None:
        self._mem_fh.write(memory_text([sample_values(x) for x in samples_of(items)]))

    def on_steps(self, rows: list[tuple[Any, list]]) -> None:
        """Steps, each (record, its samples): all the samples first, then the rows (a
        follower that reads a step's row finds its samples)."""
        self.on_samples([x for _, items in rows for x in items])
        self._steps_fh.write(steps_text([step_values(record) for record, _ in rows]))
        if time.monotonic() - self._last_json > JSON_EVERY_S:
            self._write_json()

    def on_allocations(self, rows) -> None:
        if self._allocs is not None:
            self._allocs.append(rows)

    def on_event(self, event: RunEvent) -> None:
        self._doc["events"].append(event.to_dict())
        self._write_json()

    def on_graph_summary(self, summary: dict[str, int]) -> None:
        self._doc["graphs"].append(summary)

    def on_cuda_snapshot(self, recorder) -> None:
        """CUDA: PyTorch's own allocator history for the chosen window of steps."""
        try:
            path = recorder.dump(self.folder / CUDA_SNAPSHOT)
            self._doc["cuda_snapshot"] = {"file": path.name,
                                          "steps": list(recorder.steps_recorded)}
        except OSError as exc:  # ExportError: a message, not a crash; the run data stays
            self._doc["cuda_snapshot"] = {"error": str(exc)}

    def on_finish(self, summary: dict) -> None:
        """run.json with the summary, also on a full disk: where no new file can be written
        it is rewritten in place, compact (no indent), in the space it already holds."""
        self._doc["summary"] = summary
        self._doc["finished"] = True  # runfolder.header: the writer ended its run
        try:
            self.flush()
        except OSError as exc:  # rows that did not fit: the summary still goes in
            failed: OSError | None = exc
        else:
            failed = None
        try:
            self._write_json()
        except OSError:
            compact = json.dumps(self._doc, separators=(",", ":"), default=str).encode()
            if not rewrite_in_place(self.folder / RUN_JSON, compact):
                raise
        if failed is not None:
            raise failed

    def move_to(self, folder: Path) -> None:
        """The run's files into `folder` (made if need be), each linked there exclusively
        (never over a file there) and then unlinked here: the open files stay open."""
        folder.mkdir(parents=True, exist_ok=True)
        self.flush()
        names = [n for n in RUN_FILE_NAMES if os.path.lexists(self.folder / n)]
        for name in names:
            os.link(self.folder / name, folder / name, follow_symlinks=False)
        for name in names:
            os.unlink(self.folder / name)
        self.folder = folder

    # --- helpers ---------------------------------------------------------------------------
    def flush(self) -> None:
        for fh in self._fhs:
            if not fh.closed:
                fh.flush()

    def _json(self) -> str:
        if self._history is not None and any(e.get("kind") == "toggle"
                                             for e in self._doc["events"]):
            from memlens.core.effects import events_with_effects

            effects = events_with_effects(self._history)
            if len(effects) == len(self._doc["events"]):
                self._doc["events"] = effects
        return json.dumps(self._doc, indent=1, default=str)

    def _write_json(self) -> None:
        self._last_json = time.monotonic()
        atomic_write_text(self.folder / RUN_JSON, self._json())

    def close(self) -> None:
        for fh in self._fhs:
            if not fh.closed:
                fh.close()
        allocs = getattr(self, "_allocs", None)
        if allocs is not None:
            allocs.close()


def _folder_error(folder: Path, exc: OSError) -> OSError:
    return ExportError(f"cannot write the run folder {str(folder)!r}: {exc.strerror or exc}. "
                       "Pass --out with a folder you can write to.")


_STOP = object()


class RunWriter:
    """A run sink that writes the run folder on a thread of its own (see the module doc)."""

    def __init__(self, folder: str | Path, precise: bool = False,
                 meta: dict | None = None, history: RunHistory | None = None) -> None:
        """`meta` (e.g. `{"config": ...}`) goes into the run.json written at once, with the
        CSV headers: a run killed while it allocates still leaves a folder that says what
        was asked for. `history`: the run's history, fed before this writer (a FanOut's
        earlier sink): run.json's toggle events then carry their effect
        (memlens.core.effects), as measured so far. Raises FolderTaken (a ConfigError) for
        a folder that holds a run, ExportError for one that cannot be written."""
        self.folder = Path(folder)
        self._files = FolderFiles(self.folder, precise, meta, history)
        self.failed: BaseException | None = None
        self._raised = False
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        # Held while a batch is written: a fork waits for it (_fork_guard), so a child never
        # starts with a file's buffer half written or its lock held by a thread it lacks.
        self._writing = threading.Lock()
        self._forked = False  # this object is a forked child's copy: it writes nothing
        _LIVE.add(self)
        self._thread = threading.Thread(target=self._run, name="memlens-run-writer",
                                        daemon=True)
        self._thread.start()

    # --- the sink (any thread; calls keep their order) -----------------------------------------
    def on_start(self, meta: dict) -> None:
        self._post(self._files.on_start, dict(meta))

    def on_samples(self, items: list) -> None:
        """Samples with no step row after them yet (records.samples_of takes them)."""
        self._post(self._files.on_samples, list(items))

    def on_steps(self, rows: list[tuple[Any, list]]) -> None:
        """Ended steps, each (record, its samples as records.samples_of takes them)."""
        self._post(self._files.on_steps, rows)

    def on_allocations(self, rows) -> None:
        self._post(self._files.on_allocations, rows)

    def on_event(self, event: RunEvent) -> None:
        self._post(self._files.on_event, event)

    def on_graph(self, snapshot) -> None:
        # The summary now: a queued snapshot would keep its graph alive until written.
        self._post(self._files.on_graph_summary, graph_summary(snapshot))

    def on_graph_summary(self, summary: dict[str, int]) -> None:
        self._post(self._files.on_graph_summary, summary)

    def on_cuda_snapshot(self, recorder) -> None:
        """On the caller's thread, after what came before: torch's snapshot is taken here."""
        if self._forked:
            return
        self.flush()
        self._files.on_cuda_snapshot(recorder)

    def on_finish(self, summary: dict) -> None:
        """Everything queued written, then the summary, on the caller's thread: also after a
        failed write (run.json is one small atomic write, and space freed since may let it
        through). Then closed."""
        if self._forked:
            return
        self._stop_thread()
        try:
            self._files.on_finish(summary)
        finally:
            self.close()

    def move_to(self, folder: str | Path) -> None:
        """Move the run, as written so far, into `folder` (a new run folder: a rank's inside
        the job's) and write on there; returns once moved. Raises what failed (FileExistsError
        where `folder` holds one of its files already)."""
        folder = Path(folder)
        self._post(self._files.move_to, folder)
        self.flush()
        self.folder = folder

    # --- control ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Wait until every record posted so far is in the files (or the writes failed)."""
        if self._forked or not self._thread.is_alive():
            return
        done = threading.Event()
        self._queue.put(done)
        done.wait()
        self._raise_failure()

    def close(self) -> None:
        """Write what is queued, then end the thread and close the files. Raises a write
        failure not raised yet."""
        if self._forked:
            return
        self._stop_thread()
        self._files.close()
        self._raise_failure()

    def _stop_thread(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _post(self, call, *args) -> None:
        if self._forked:
            return
        self._raise_failure()
        if self.failed is None:
            self._queue.put((call, args))

    def _raise_failure(self) -> None:
        if self.failed is not None and not self._raised:
            self._raised = True
            raise self.failed

    def _run(self) -> None:
        get = self._queue.get
        while True:
            batch = [get()]
            while True:  # everything queued now: one flush for the lot
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            with self._writing:
                if not self._write_batch(batch):
                    return

    def _write_batch(self, batch: list) -> bool:
        """Write a batch and flush; False at the end (_STOP)."""
        for item in batch:
            if item is _STOP:
                self._flush_files()
                return False
            if isinstance(item, threading.Event):
                self._flush_files()
                item.set()
                continue
            if self.failed is None:
                call, args = item
                try:
                    call(*args)
                except BaseException as exc:  # raised to the producer at its next call
                    self.failed = exc
        self._flush_files()
        return True

    def _flush_files(self) -> None:
        if self.failed is None:
            try:
                self._files.flush()
            except OSError as exc:
                self.failed = exc


# --- fork: a child (a script's os.fork(), a DataLoader worker) never writes its parent's run --
_LIVE: weakref.WeakSet[RunWriter] = weakref.WeakSet()
_HELD: list[RunWriter] = []


def _before_fork() -> None:
    """Wait for each writer's batch in progress: the child's copies of the files are then
    flushed and unlocked."""
    _HELD[:] = list(_LIVE)
    for w in _HELD:
        w._writing.acquire()


def _after_fork_in_parent() -> None:
    for w in _HELD:
        w._writing.release()
    _HELD.clear()


def _after_fork_in_child() -> None:
    for w in _HELD:
        w._forked = True  # the folder is the parent's: the child's copy writes nothing
        w._writing.release()
    _HELD.clear()


if hasattr(os, "register_at_fork"):  # POSIX; where there is no fork there is no child
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
