"""trace.json in the Chrome Trace Event Format, for ui.perfetto.dev and chrome://tracing.

One process ("memlens: <preset> on <device>") with one thread ("training loop"):
- a complete event (ph "X", cat "step") per step, with the step's figures as args, and
  inside it one per phase that ran (cat "phase": zero_grad, forward, backward, optimizer,
  eval);
- counters (ph "C"): "memory" with one series per category (a stacked chart in
  chrome://tracing, one track per series in Perfetto), "memory total", "step peak" (the
  step's peak bytes from its start), and "process heap" / "cuda allocator" where measured;
- process-wide instant events (ph "i", s "p") for toggles, errors, leaks and notes;
- metadata events (ph "M") naming the process and thread.

Timestamps and durations are microseconds from the run's start (three decimals). A phase
ends at the memory sample taken after it and lasts its measured time; a step spans its
phases and ends at its record's time. Every event puts "ts" first and no array at its top
level, which Perfetto's JSON reader wants; "otherData" holds the run's config and summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from memlens.core.exports import _text
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES, PHASES, SAMPLE_PHASE_CODE
from memlens.core.runfolder.atomic import atomic_open

PID, TID = 1, 1
_NS = 1_000_000_000


def _ns(seconds: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(seconds, dtype=np.float64) * _NS).astype(np.int64)


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: write null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    # Raw UTF-8, not \u escapes: older Perfetto JSON readers reject \u in what they scan.
    return json.dumps(_clean(value), ensure_ascii=False, separators=(",", ":"), default=str)


class _Spans:
    """Where each step and phase lies, in integer nanoseconds."""

    def __init__(self, history: RunHistory) -> None:
        steps = history.steps
        n = len(steps)
        self.step = steps.column("step", 0, n).astype(np.int64)
        end = _ns(steps.column("time_s", 0, n))
        ms = np.stack([np.nan_to_num(steps.column(f"{p}_ms", 0, n)) for p in PHASES], axis=1)
        dur = np.round(ms * 1e6).astype(np.int64)
        ran = ms > 0
        # A phase ends when the sample after it was taken; without one, phases are laid
        # back to back so the last ends with the step.
        sample_end = self._sample_ends(history, self.step)
        later = np.cumsum((dur * ran)[:, ::-1], axis=1)[:, ::-1] - dur * ran
        fallback = end[:, None] - later
        phase_end = np.where(sample_end >= 0, sample_end, fallback)
        phase_start = np.maximum(phase_end - dur, 0)
        first = np.where(ran, phase_start, np.iinfo(np.int64).max).min(axis=1, initial=2**62)
        last = np.where(ran, phase_end, 0).max(axis=1, initial=0)
        self.start = np.minimum(first, end)
        self.end = np.maximum(end, last)
        self.phase_start, self.phase_end, self.ran = phase_start, phase_end, ran

    @staticmethod
    def _sample_ends(history: RunHistory, step: np.ndarray) -> np.ndarray:
        samples = history.samples
        m = len(samples)
        out = np.full((len(step), len(PHASES)), -1, dtype=np.int64)
        if not m or not len(step):
            return out
        key = (samples.column("step", 0, m).astype(np.int64) * 8
               + samples.column("phase", 0, m).astype(np.int64))
        when = _ns(samples.column("time_s", 0, m))
        if np.any(key[1:] < key[:-1]):
            order = np.argsort(key, kind="stable")
            key, when = key[order], when[order]
        for j, phase in enumerate(PHASES):
            want = step * 8 + SAMPLE_PHASE_CODE[phase]
            pos = np.searchsorted(key, want, side="right") - 1  # the last such sample
            found = (pos >= 0) & (key[np.maximum(pos, 0)] == want)
            out[:, j] = np.where(found, when[np.maximum(pos, 0)], -1)
        return out


def _metadata(history: RunHistory) -> list[str]:
    config = history.meta.get("config") or {}
    env = history.meta.get("environment") or {}
    process = f"memlens: {config.get('preset', 'run')} on {env.get('device', '?')}"
    rows = [
        {"ts": 0, "name": "process_name", "ph": "M", "pid": PID, "tid": TID,
         "args": {"name": process}},
        {"ts": 0, "name": "process_sort_index", "ph": "M", "pid": PID, "tid": TID,
         "args": {"sort_index": 0}},
        {"ts": 0, "name": "thread_name", "ph": "M", "pid": PID, "tid": TID,
         "args": {"name": "training loop"}},
        {"ts": 0, "name": "thread_sort_index", "ph": "M", "pid": PID, "tid": TID,
         "args": {"sort_index": 0}},
    ]
    return [_dumps(r) for r in rows]


_STEP_INTS = ("allocated_bytes", "peak_bytes", "reserved_bytes", "graph_nodes", "saved_bytes",
              "retained_bytes")
_STEP_FLOATS = ("loss", "grad_norm", "step_ms", "eval_loss")


def _step_chunks(history: RunHistory, spans: _Spans) -> Iterator[bytes]:
    steps = history.steps
    n = len(steps)
    cols = {c: steps.column(c, 0, n) for c in (*_STEP_INTS, *_STEP_FLOATS)}
    top_step = int(np.abs(spans.step).max(initial=0))
    dur = spans.end - spans.start
    parts: list = [',\n{"ts":', _text.Micros(int(spans.start.max(initial=0))),
                   ',"dur":', _text.Micros(int(dur.max(initial=0))),
                   ',"name":"step ', _text.Int(top_step, signed=True),
                   f'","cat":"step","ph":"X","pid":{PID},"tid":{TID},"args":{{"step":',
                   _text.Int(top_step, signed=True)]
    values: list = [spans.start, dur, spans.step, spans.step]
    for c in ("loss", "grad_norm", "step_ms", *_STEP_INTS, "eval_loss"):
        if c in _STEP_FLOATS:
            parts += [f',"{c}":', _text.Float()]
        else:
            parts += [f',"{c}":', _text.Int(_text.max_abs(cols[c]), signed=True, nullable=True)]
        values.append(cols[c])
    parts.append("}}")
    yield from _text.RowTemplate(parts).render(*values)


def _phase_chunks(spans: _Spans) -> Iterator[bytes]:
    which = np.nonzero(spans.ran)  # (step row, phase index) of every phase that ran
    start = spans.phase_start[which]
    dur = spans.phase_end[which] - start
    template = _text.RowTemplate([
        ',\n{"ts":', _text.Micros(int(start.max(initial=0))),
        ',"dur":', _text.Micros(int(dur.max(initial=0))),
        ',"name":"', _text.Choice(PHASES), f'","cat":"phase","ph":"X","pid":{PID},"tid":{TID},'
        '"args":{"step":', _text.Int(int(np.abs(spans.step).max(initial=0)), signed=True),
        "}}",
    ])
    yield from template.render(start, dur, which[1], spans.step[which[0]])


def _counter_chunks(history: RunHistory, spans: _Spans) -> Iterator[bytes]:
    samples = history.samples
    m = len(samples)
    if m:
        when = _ns(samples.column("time_s", 0, m))
        cats = [np.nan_to_num(samples.column(c, 0, m)).astype(np.int64)
                for c in MEMORY_CATEGORIES]
        yield from _counter("memory", dict(zip(MEMORY_CATEGORIES, cats, strict=True)), when)
        yield from _counter("memory total", {"bytes": np.sum(cats, axis=0)}, when)
        heap = samples.column("heap", 0, m)
        if np.isfinite(heap).any():
            ok = np.isfinite(heap)
            yield from _counter("process heap", {"bytes": heap[ok]}, when[ok])
        allocated, reserved = samples.column("allocated", 0, m), samples.column("reserved", 0, m)
        ok = np.isfinite(allocated) & np.isfinite(reserved)
        if ok.any():
            yield from _counter("cuda allocator", {"allocated": allocated[ok],
                                                   "reserved": reserved[ok]}, when[ok])
    if len(spans.step):
        peak = np.nan_to_num(history.steps.column("peak_bytes", 0, len(history.steps)))
        yield from _counter("step peak", {"bytes": peak}, spans.start)


def _counter(name: str, series: dict[str, np.ndarray], when: np.ndarray) -> Iterator[bytes]:
    values = [np.asarray(v).astype(np.int64) for v in series.values()]
    top = int(max((np.abs(v).max(initial=0) for v in values), default=0))
    parts: list = [',\n{"ts":', _text.Micros(int(when.max(initial=0))),
                   f',"name":"{name}","ph":"C","pid":{PID},"args":{{']
    for i, key in enumerate(series):
        parts += [("," if i else "") + f'"{key}":', _text.Int(top, signed=True)]
    parts.append("}}")
    yield from _text.RowTemplate(parts).render(when, *values)


def _instant_rows(history: RunHistory) -> Iterator[str]:
    for e in history.events():
        args = {k: v for k, v in e.to_dict().items() if k not in ("time_s",)}
        ts = max(0.0, e.time_s * 1e6)
        yield (f'{{"ts":{ts:.3f},"name":{_dumps(e.label())},"cat":{_dumps(e.kind)},'
               f'"ph":"i","s":"p","pid":{PID},"tid":{TID},"args":{_dumps(args)}}}')


def write_chrome_trace(history: RunHistory, path: str | Path) -> Path:
    """Write trace.json atomically; returns its path."""
    spans = _Spans(history)
    other = {"generator": "memlens", "config": history.meta.get("config"),
             "environment": history.meta.get("environment"), "summary": history.summary}
    path = Path(path)
    with atomic_open(path, "wb") as fh:
        fh.write(b'{"displayTimeUnit":"ms","traceEvents":[\n')
        fh.write(",\n".join(_metadata(history)).encode())
        # Steps before phases: a step and its first phase may start at the same time, and
        # viewers that keep file order for ties then nest the phase inside the step.
        for chunk in _step_chunks(history, spans):
            fh.write(chunk)
        for chunk in _phase_chunks(spans):
            fh.write(chunk)
        for chunk in _counter_chunks(history, spans):
            fh.write(chunk)
        for row in _instant_rows(history):
            fh.write((",\n" + row).encode())
        fh.write(b'\n],"otherData":' + _dumps(other).encode() + b"}\n")
    return path
