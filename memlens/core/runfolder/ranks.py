"""A torchrun job's ranks side by side: each rank's figures and the job's imbalance, and for
a sharded or data-parallel job what that does on each rank (run.json's `sharding`, written by
core.recorder.sharded): FSDP's all-gather peak, each rank's shard and its padding, the
parameters sharded unevenly, DDP's buckets.

The one place these figures are computed: the `ranks` command prints them and the app's
ranks tab shows them, from histories read by the run folder's reader (a saved job) or its
follower (a live one), so the two cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memlens.core.history import SAMPLE_COLUMNS, RunHistory
from memlens.core.records import MEMORY_CATEGORIES
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.reader import load_run, rank_folders
from memlens.core.units import format_bytes, format_ms

STEP_TIME_PERCENTILE = 95


@dataclass(frozen=True)
class RankFigures:
    """One rank: where it ran, how long and how large. `peak_bytes` is the largest
    steps.csv peak (memory.csv's largest total while no step is written yet); `at_peak`
    holds the categories of the largest sample of that peak's step."""

    rank: int
    folder: Path
    host: str
    node_rank: int | None
    local_rank: int | None
    steps: int
    peak_bytes: float
    peak_step: int | None
    mean_step_ms: float
    p95_step_ms: float
    at_peak: dict[str, float] = field(default_factory=dict)
    finished: bool = False
    # the largest bytes of each category in any sample (gathered: FSDP's all-gather peak)
    largest: dict[str, float] = field(default_factory=dict)
    sharding: dict = field(default_factory=dict)  # run.json's `sharding`, where it has one

    @property
    def gathered_peak(self) -> float:
        return self.largest.get("gathered", 0.0)


@dataclass(frozen=True)
class JobFigures:
    """Every rank of a job, and which one is largest and which is slowest."""

    folder: Path
    ranks: list[RankFigures]
    largest: RankFigures | None
    smallest: RankFigures | None
    slowest: RankFigures | None
    median_step_ms: float

    @property
    def peak_ratio(self) -> float:
        """The largest rank's peak over the smallest's (nan without two measured peaks)."""
        if self.largest is None or self.smallest is None or self.smallest.peak_bytes <= 0:
            return math.nan
        return self.largest.peak_bytes / self.smallest.peak_bytes

    @property
    def slowest_vs_median(self) -> float:
        """The slowest rank's mean step time over the median of the ranks' mean step times."""
        if self.slowest is None or not self.median_step_ms > 0:
            return math.nan
        return self.slowest.mean_step_ms / self.median_step_ms

    @property
    def categories(self) -> tuple[str, ...]:
        """The categories any rank holds at its peak, in MEMORY_CATEGORIES order."""
        return tuple(c for c in MEMORY_CATEGORIES
                     if any(r.at_peak.get(c, 0) > 0 for r in self.ranks))

    @property
    def sharded(self) -> bool:
        """Some rank's models are sharded by FSDP."""
        return any(str(r.sharding.get("kind", "")).startswith("fsdp") for r in self.ranks)


def rank_number(folder: Path) -> int:
    """rank<N>'s N (rank_folders names only such folders)."""
    return int(Path(folder).name[4:])


def rank_figures(folder: Path, history: RunHistory) -> RankFigures:
    meta = history.meta or {}
    steps = history.steps
    step_ms = steps.column("step_ms")
    step_ms = step_ms[~np.isnan(step_ms)]
    totals = history.samples.column("total")
    peaks = steps.column("peak_bytes")
    peak, peak_step = math.nan, None
    if len(peaks) and not np.isnan(peaks).all():
        i = int(np.nanargmax(peaks))
        peak, peak_step = float(peaks[i]), int(steps.column("step")[i])
    elif len(totals):
        peak = float(totals.max())
    return RankFigures(
        rank=rank_number(folder), folder=Path(folder),
        host=str(meta.get("host") or "?"),
        node_rank=_whole(meta.get("node_rank")), local_rank=_whole(meta.get("local_rank")),
        steps=len(steps), peak_bytes=peak, peak_step=peak_step,
        mean_step_ms=float(step_ms.mean()) if len(step_ms) else math.nan,
        p95_step_ms=(float(np.percentile(step_ms, STEP_TIME_PERCENTILE)) if len(step_ms)
                     else math.nan),
        at_peak=_categories_at(history, peak_step), finished=history.summary is not None,
        largest={c: _largest(history, c) for c in MEMORY_CATEGORIES},
        sharding=meta.get("sharding") if isinstance(meta.get("sharding"), dict) else {})


def _largest(history: RunHistory, category: str) -> float:
    values = history.samples.column(category)
    return float(np.nanmax(values)) if len(values) and not np.isnan(values).all() else 0.0


def _categories_at(history: RunHistory, step: int | None) -> dict[str, float]:
    """The categories of the largest sample of `step` (of the whole run where the step
    has no samples, or no step is known)."""
    samples = history.samples
    if not len(samples):
        return {}
    totals = samples.column("total")
    candidates = np.arange(len(totals))
    if step is not None:
        in_step = np.flatnonzero(samples.column("step") == step)
        if len(in_step):
            candidates = in_step
    i = int(candidates[np.argmax(totals[candidates])])
    row = samples.rows(i, i + 1)[0]
    return {c: float(row[SAMPLE_COLUMNS.index(c)]) for c in MEMORY_CATEGORIES}


def _whole(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def job_figures(folder: Path, histories: Iterable[tuple[Path, RunHistory]]) -> JobFigures:
    """The job's figures from each rank's (folder, history), in rank order."""
    ranks = sorted((rank_figures(f, h) for f, h in histories), key=lambda r: r.rank)
    measured = [r for r in ranks if r.peak_bytes > 0]
    timed = [r for r in ranks if r.mean_step_ms >= 0]
    return JobFigures(
        folder=Path(folder), ranks=ranks,
        largest=max(measured, key=lambda r: r.peak_bytes) if len(measured) >= 1 else None,
        smallest=min(measured, key=lambda r: r.peak_bytes) if len(measured) >= 1 else None,
        slowest=max(timed, key=lambda r: r.mean_step_ms) if timed else None,
        median_step_ms=(float(np.median([r.mean_step_ms for r in timed])) if timed
                        else math.nan))


class NoRanks(RunFolderError):
    """A folder that holds no rank folders."""


def read_job(folder: str | Path) -> JobFigures:
    """A saved (or growing) job folder's figures; NoRanks where it holds no rank<N> run
    folders, RunFolderError naming the file where a rank's folder is damaged."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NoRanks(f"{str(folder)!r} is not a folder; give the folder a torchrun job "
                      "recorded into (the one holding rank0, rank1, ...)")
    found = rank_folders(folder)
    if not found:
        raise NoRanks(f"{str(folder)!r} holds no rank folders (rank0/run.json, ...); give "
                      "the folder of a watched torchrun job (watch --out DIR under torchrun)")
    return job_figures(folder, [(f, load_run(f)) for f in found])


# --- the table the CLI prints and the app shows ----------------------------------------------

# A sharded job's columns: this rank's shard of the parameters (without FSDP's padding), the
# padding FSDP adds to make every rank's shard the same size, the all-gather peak.
SHARD_COLUMNS = ("shard", "padding", "gathered peak")


def table_header(job: JobFigures) -> list[str]:
    return ["rank", "host", "node", "local", "steps", "peak", "mean step",
            f"p{STEP_TIME_PERCENTILE} step", *(f"{c} at peak" for c in job.categories),
            *(SHARD_COLUMNS if job.sharded else ()), "note"]


def table_rows(job: JobFigures) -> list[list[str]]:
    """One row of text a rank, in table_header's order."""
    return [[str(r.rank), r.host, _or_dash(r.node_rank), _or_dash(r.local_rank),
             str(r.steps), format_bytes(r.peak_bytes), format_ms(r.mean_step_ms),
             format_ms(r.p95_step_ms),
             *(format_bytes(r.at_peak.get(c, math.nan)) for c in job.categories),
             *(_shard_cells(r) if job.sharded else ()), note(job, r)] for r in job.ranks]


def _shard_cells(r: RankFigures) -> list[str]:
    facts = r.sharding
    shard, padded = _number(facts.get("shard_bytes")), _number(facts.get("padded_bytes"))
    return [format_bytes(shard), format_bytes(padded - shard), format_bytes(r.gathered_peak)]


def _number(value) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else math.nan


def note(job: JobFigures, r: RankFigures) -> str:
    marks = []
    if len(job.ranks) > 1 and job.largest is not None and r.rank == job.largest.rank and \
            job.largest.peak_bytes != job.smallest.peak_bytes:
        marks.append("largest")
    if len(job.ranks) > 1 and job.slowest is not None and r.rank == job.slowest.rank:
        marks.append("slowest")
    if not r.finished:
        marks.append("running")
    return ", ".join(marks)


def imbalance_text(job: JobFigures) -> str:
    """The job's imbalance in one line: peaks max/min, the slowest against the median."""
    parts = [f"{len(job.ranks)} ranks"]
    if job.largest is not None and job.smallest is not None and \
            job.largest.peak_bytes == job.smallest.peak_bytes:
        parts.append(f"the same peak on every rank, {format_bytes(job.largest.peak_bytes)}")
    elif job.largest is not None and job.smallest is not None:
        parts.append(f"peak max/min {job.peak_ratio:.2f}x (rank {job.largest.rank} "
                     f"{format_bytes(job.largest.peak_bytes)}, rank {job.smallest.rank} "
                     f"{format_bytes(job.smallest.peak_bytes)})")
    if job.slowest is not None:
        parts.append(f"slowest rank {job.slowest.rank}: mean step "
                     f"{format_ms(job.slowest.mean_step_ms)}, {job.slowest_vs_median:.2f}x "
                     f"the median {format_ms(job.median_step_ms)}")
    return "; ".join(parts)


def sharding_text(job: JobFigures) -> str:
    """What sharding or data parallelism does on the ranks, in a line or two; "" for a job
    with neither: FSDP's all-gather peak on each rank, the parameters sharded unevenly and
    what that does to the shards and the optimizer state, DDP's buckets."""
    facts = [(r, r.sharding) for r in job.ranks if r.sharding]
    if not facts:
        return ""
    kind = str(facts[0][1].get("kind", ""))
    if kind == "ddp":
        sizes = {r.rank: r.largest.get("buckets", 0.0) for r, _ in facts}
        views = any(f.get("gradient_as_bucket_view") for _, f in facts)
        return (f"DDP's gradient buckets: {_per_rank(sizes)}"
                + (" (gradient_as_bucket_view: the gradients are views into them)" if views
                   else " (a copy of the gradients for the all-reduce, as large as the "
                        "parameters that train)"))
    name = {"fsdp2": "FSDP2 (fully_shard)", "fsdp1": "FSDP1"}.get(kind, kind)
    parts = [f"{name}: all-gather peak {_per_rank({r.rank: r.gathered_peak for r, _ in facts})}"
             " on top of each rank's shard"]
    uneven = _uneven_text(facts)
    if uneven:
        parts.append(uneven)
    return "; ".join(parts)


def _uneven_text(facts: list[tuple[RankFigures, dict]]) -> str:
    """The unevenly sharded parameters, named with each rank's rows, and the imbalance they
    make: in the shards (FSDP pads them to one size) and in the optimizer state (unpadded)."""
    count = max((c for _, f in facts if isinstance(c := f.get("uneven"), int)
                 and not isinstance(c, bool)), default=0)
    if count <= 0:
        return ""
    rows: dict[str, list] = {}
    for _, f in facts:
        for p in f.get("uneven_params") or ():
            if isinstance(p, dict):
                rows.setdefault(f"{p.get('name')} {p.get('shape')}", []).append(p.get("rows"))
    named = ", ".join(f"{k}: {' | '.join(map(str, v))} rows" for k, v in list(rows.items())[:3])
    world = facts[0][1].get("world_size", len(facts))
    text = (f"uneven shard: {count} parameter{'s' if count > 1 else ''} not divisible by the "
            f"{world} ranks ({named}{', ...' if count > 3 else ''})")
    shards = {r.rank: _number(f.get("shard_bytes")) for r, f in facts}
    big, small = max(shards, key=shards.get), min(shards, key=shards.get)
    if shards[small] > 0 and shards[big] != shards[small]:
        text += (f": rank {big}'s shard holds {format_bytes(shards[big] - shards[small])} more "
                 f"than rank {small}'s ({shards[big] / shards[small]:.3g}x), padded by FSDP to "
                 f"{format_bytes(_number(facts[0][1].get('padded_bytes')))} on each")
        opt = {r.rank: r.largest.get("optimizer", 0.0) for r, _ in facts}
        if opt[small] > 0 and opt[big] != opt[small]:
            text += (f"; optimizer state (unpadded) rank {big} {opt[big] / opt[small]:.2f}x "
                     f"rank {small}")
    return text


def _per_rank(values: dict[int, float]) -> str:
    return ", ".join(f"rank {k} {format_bytes(v)}" for k, v in sorted(values.items()))


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
