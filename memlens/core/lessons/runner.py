"""Running the lessons: each lesson's two arms interleaved in blocks, rows with verdicts.

A plain object the CLI and the app's worker drive alike: `run()` in the calling thread,
`stop()` from any thread (what was measured is kept: the rows of the lessons done, and of
the one stopped, from the steps it ran), `progress` called from the arms' threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlens.core.config import RunConfig
from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.lessons.adaptive import FULL_BUDGET, QUICK_BUDGET, AdaptiveBlocks, Budget
from memlens.core.lessons.catalog import Lesson, Metric, lessons_for
from memlens.core.lessons.interleave import Turns, TurnSink
from memlens.core.lessons.measure import Reading, read_metric
from memlens.core.lessons.timing import (
    Machine,
    cores,
    free_threads,
    load_average,
    paired,
    time_effect,
)
from memlens.core.lessons.verdict import (
    LOWER_BOUND,
    MIN_TIME_BLOCKS,
    SAME,
    TOO_FEW,
    exact_verdict,
    time_verdict,
)
from memlens.core.model_file import preset_label

# The arms take turns step by step: a round is one step of each, side by side in time.
FULL_STEPS, FULL_BLOCK = 40, 1
# Quick: memory figures are exact from the second completed step on (optimizer state is
# made at the first; a lesson that needs more says so in min_steps), so a few steps give
# the full report's bytes. A lesson with a claimed time figure then adds rounds within its
# budget (lessons.adaptive) until the figure is decided.
QUICK_STEPS, QUICK_BLOCK = 4, 1
NOT_MEASURABLE = "not measurable on this CPU"
BOUND_NOTE = ("on a CPU outside precise mode a step peak is the largest phase-boundary "
              "total, a lower bound of the true peak (blind to what a kernel allocates and "
              "frees inside a phase), so it gets no verdict; --set precise=true measures "
              "it exactly")


@dataclass
class Progress:
    """Where a report is: lesson `index` of `count`, and steps done of the lesson's total."""

    index: int
    count: int
    lesson: str
    preset: str
    steps_done: int
    steps_total: int
    adaptive: bool = False  # steps_total is a cap: the lesson stops once its figures decide

    def text(self) -> str:
        return (f"lesson {self.index + 1}/{self.count}: {self.lesson} on {self.preset}, "
                f"step {self.steps_done}/{self.steps_total}")


@dataclass
class LessonRow:
    """One metric of one lesson on one preset: the two arms' figures and the verdict."""

    lesson: str
    title: str
    preset: str
    device: str
    metric: str
    kind: str  # memory | time | count
    off_label: str
    on_label: str
    off: float | None
    on: float | None
    change: float | None  # on / off
    ci_low: float | None
    ci_high: float | None
    significant: bool
    exact: bool  # memory and counts: exact figures, no interval
    claim: str
    verdict: str
    runs: dict[str, str]
    steps: dict[str, int]
    # Why the figures are not what they seem, for a learner: "not measurable on this CPU"
    # and the reason, or that this CPU emulates bf16 (its time figures are this CPU's).
    note: str = ""
    # What the machine did while the lesson ran (lessons.timing.Machine.as_dict): its cores,
    # the arms' compute threads, the load average as it began and ended.
    machine: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LessonsReport:
    presets: list[str]
    steps: int
    block: int
    quick: bool
    budget_s: float = 0.0  # step time a lesson may spend on more rounds (lessons.adaptive)
    device: str = ""
    rows: list[LessonRow] = field(default_factory=list)
    stopped: bool = False
    wall_s: float = 0.0
    environment: dict[str, Any] = field(default_factory=dict)
    # (lesson, preset) -> {"off": RunHistory, "on": RunHistory}: the runs behind the rows
    histories: dict[tuple[str, str], dict[str, RunHistory]] = field(default_factory=dict)


@dataclass
class _Arm:
    name: str  # "off" | "on"
    config: RunConfig
    history: RunHistory
    folder: Path | None
    summary: Any = None
    error: BaseException | None = None


class LessonRunner:
    """Runs the lessons for some presets. `out`: a folder for the arms' run folders (None:
    in memory only). `settings`: overrides for every arm (e.g. sizes, device)."""

    def __init__(self, presets: list[str], *, steps: int | None = None, quick: bool = False,
                 out: str | Path | None = None, settings: dict[str, Any] | None = None,
                 names: tuple[str, ...] | None = None, block: int | None = None,
                 progress: Callable[[Progress], None] | None = None,
                 budget: Budget | None = None,
                 lessons: tuple[Lesson, ...] | None = None) -> None:
        self.presets = list(presets)
        self.quick = quick
        self.steps = steps or (QUICK_STEPS if quick else FULL_STEPS)
        self.block = block or (QUICK_BLOCK if quick else FULL_BLOCK)
        self.budget = budget or (QUICK_BUDGET if quick else FULL_BUDGET)
        self.out = Path(out) if out is not None else None
        self.settings = dict(settings or {})
        self.names = names
        self.lessons = lessons  # instead of the catalog's (a benchmark's A/A lesson)
        self.progress = progress
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._live: tuple[list[RunControls], Turns] | None = None
        # settings the report chose for the arms (fewer compute threads on a busy machine),
        # under the caller's own; and why
        self._auto: dict[str, Any] = {}
        self.threads_note = ""

    # --- control (any thread) ---------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            live = self._live
        if live is not None:
            for controls in live[0]:
                controls.stop()
            live[1].stop()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def plan(self) -> list[tuple[Lesson, str]]:
        """(lesson, preset) pairs in the order they run (settings checked here)."""
        from memlens.core.training import resolve_device

        device = resolve_device(RunConfig().with_values(self.settings).device)
        if self.lessons is not None:
            return [(lesson, preset) for preset in self.presets for lesson in self.lessons]
        return [(lesson, preset) for preset in self.presets
                for lesson in lessons_for(preset, device.type == "cuda", self.names)]

    # --- running ----------------------------------------------------------------------------
    def run(self) -> LessonsReport:
        import time

        t0 = time.perf_counter()
        load_start = _load_average()
        self._choose_threads(load_start[0] if load_start else None)
        report = LessonsReport(self.presets, self.steps, self.block, self.quick,
                               budget_s=self.budget.step_s)
        plan = self.plan()
        # The arms' two threads live for the whole report: a thread that used torch's
        # OpenMP pool and ended while another arm ran slowed that arm many times over.
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lesson")
        try:
            for index, (lesson, preset) in enumerate(plan):
                if self.stopping:
                    break
                reason = self._unmeasurable(lesson, preset)
                if reason is not None:
                    report.rows.extend(self._unmeasured_rows(lesson, preset, reason))
                    continue
                began = load_average()
                arms = self._run_lesson(pool, lesson, preset, index, len(plan))
                report.histories[(lesson.name, preset_label(preset))] = {
                    a.name: a.history for a in arms}
                threads = arms[0].history.meta.get("environment", {}).get("threads", 0)
                machine = Machine(cores(), int(threads or 0), began, load_average())
                report.rows.extend(self._rows(lesson, preset, arms, machine))
                if not report.environment:
                    report.environment = dict(arms[0].history.meta.get("environment", {}))
                    report.device = report.environment.get("device", "")
        except KeyboardInterrupt:  # Ctrl-C in the CLI: keep what was measured
            self.stop()
        finally:
            pool.shutdown(wait=True)
        report.stopped = self.stopping
        report.wall_s = time.perf_counter() - t0
        report.environment = _report_environment(report.environment, load_start)
        report.environment["cores"] = cores()
        if self.threads_note:
            report.environment["threads_note"] = self.threads_note
        return report

    def _choose_threads(self, load: float | None) -> None:
        """On a machine whose other work leaves fewer free cores than torch's default
        threads, the arms run on the threads there are cores for (lessons.timing), unless
        the caller set `threads`; the report says so."""
        from memlens.core.training import default_threads, resolve_device

        self._auto, self.threads_note = {}, ""
        if "threads" in self.settings or resolve_device(
                RunConfig().with_values(self.settings).device).type == "cuda":
            return
        default = default_threads()
        n = free_threads(default, load, cores())
        if n < default:
            self._auto = {"threads": n}
            self.threads_note = (
                f"the machine was busy as the report began (load {load:.1f} on {cores()} "
                f"cores): each arm ran on {n} compute thread{'s' if n != 1 else ''}, not "
                f"torch's {default}, so that none waits for a core")

    def _configs(self, lesson: Lesson, preset: str) -> dict[str, RunConfig]:
        """The two arms' settings, built as `run` builds a run's: memlens's defaults, a model
        file's CONFIG, then the lesson's and the report's settings."""
        from memlens.core.model_file import with_model_file

        steps = self._base_steps(lesson)
        if self._adaptive(lesson):  # a cap: the arms stop once the figures are decided
            steps = max(steps, self.budget.max_blocks * self.block)

        def build(cfg: RunConfig) -> RunConfig:
            return cfg.with_values({"preset": preset, "steps": steps, **lesson.base,
                                    **self._auto, **self.settings})

        base = with_model_file(build(RunConfig()), build)
        configs = {"off": base.with_values(lesson.off), "on": base.with_values(lesson.on)}
        if lesson.off_batch_scale > 1:
            configs["off"] = configs["off"].with_values(
                {"batch_size": _batch_size(base) * lesson.off_batch_scale})
        return configs

    def _base_steps(self, lesson: Lesson) -> int:
        steps = max(self.steps, lesson.min_steps)
        return min(steps, lesson.max_steps) if lesson.max_steps else steps

    @staticmethod
    def _claimed_times(lesson: Lesson) -> list[Metric]:
        return [m for m in lesson.metrics if m.kind == "time" and m.claim is not None]

    def _adaptive(self, lesson: Lesson) -> bool:
        """Whether the lesson adds rounds until its time claims are decided: one with a
        claimed time figure, unless its steps are capped (a lesson that grows memory)."""
        return bool(self._claimed_times(lesson)) and not lesson.max_steps

    def check_fits(self) -> None:
        """ConfigError (with the estimate) when a lesson's arms, which run at the same time,
        cannot fit in free memory together: checked before anything is measured, as `run`
        checks its run (preflight), unless force=true."""
        from memlens.core.options import ConfigError
        from memlens.core.preflight import available_memory, estimate_run_memory
        from memlens.core.training import resolve_device
        from memlens.core.units import format_bytes

        for lesson, preset in self.plan():
            configs = list(self._configs(lesson, preset).values())
            if any(c.force for c in configs):
                continue
            estimates = [estimate_run_memory(c) for c in configs]
            if any(e is None for e in estimates):
                continue  # a model file the meta device cannot run: its build reports
            device = resolve_device(configs[0].device)
            free, source = available_memory(device)
            need = sum(e.total for e in estimates)
            if free is not None and need > free:
                raise ConfigError(
                    f"lesson {lesson.name} on {preset_label(preset)} runs its two arms at "
                    f"once and needs about {format_bytes(need)} on {device.type} "
                    f"(one arm: {estimates[0].text()}), but {format_bytes(free)} is "
                    f"available ({source}). Lower width, batch_size or seq_len with --set, "
                    "or pass --set force=true to start anyway.")

    def _unmeasurable(self, lesson: Lesson, preset: str) -> str | None:
        """Why this machine cannot run one of the lesson's arms (AMP bf16 on a CPU whose
        oneDNN lacks one of the model's layers), or None."""
        from memlens.core.options import ConfigError
        from memlens.core.preflight import check_amp
        from memlens.core.training import resolve_device

        for cfg in self._configs(lesson, preset).values():
            try:
                check_amp(cfg, resolve_device(cfg.device))
            except ConfigError as exc:
                return str(exc).removeprefix("amp=bf16: ")
        return None

    def _unmeasured_rows(self, lesson: Lesson, preset: str, reason: str) -> list[LessonRow]:
        from memlens.core.training import resolve_device

        device = str(resolve_device(RunConfig().with_values(self.settings).device))
        return [LessonRow(
            lesson=lesson.name, title=lesson.title, preset=preset_label(preset), device=device,
            metric=m.name, kind=m.kind, off_label=lesson.off_label, on_label=lesson.on_label,
            off=None, on=None, change=None, ci_low=None, ci_high=None, significant=False,
            exact=m.kind != "time", claim=m.claim.text if m.claim else "",
            verdict=NOT_MEASURABLE, runs={}, steps={}, note=reason) for m in lesson.metrics]

    def _run_lesson(self, pool: ThreadPoolExecutor, lesson: Lesson, preset: str, index: int,
                    count: int) -> list[_Arm]:
        from memlens.core.loop import run_training
        from memlens.core.runfolder.writer import RunWriter
        from memlens.core.sinks import FanOut

        configs = self._configs(lesson, preset)
        label = preset_label(preset)
        arms = [_Arm(name, cfg, RunHistory(), self._arm_folder(label, lesson, name))
                for name, cfg in configs.items()]
        total = sum(a.config.steps for a in arms)
        adaptive = self._adaptive(lesson)
        # one block an arm where the lesson is not interleaved: off runs, then on
        block = self.block if lesson.interleaved else max(a.config.steps for a in arms)
        done = [0]
        done_lock = threading.Lock()

        def stepped() -> None:
            with done_lock:
                done[0] += 1
                n = done[0]
            if self.progress is not None:
                self.progress(Progress(index, count, lesson.name, label, n, total, adaptive))

        turns = Turns(len(arms))
        # Each arm's own controls: run_training reads the techniques from them.
        controls = [RunControls(a.config.techniques) for a in arms]
        on_block = self._round_judge(lesson, arms, controls, turns) if adaptive else None
        with self._lock:
            self._live = (controls, turns)
        if self.stopping:
            for c in controls:
                c.stop()
            turns.stop()
        writers = [RunWriter(a.folder) if a.folder is not None else None for a in arms]

        def work(i: int, arm: _Arm) -> None:
            threading.current_thread().name = f"lesson-{arm.name}"
            sink = FanOut(arm.history, writers[i],
                          TurnSink(turns, i, block, arm.config.steps, stepped, on_block))
            try:
                # the heap at every step: a lesson's heap growth a step (catalog) reads it
                arm.summary = run_training(arm.config, controls[i], sink, on_error="continue",
                                           heap_every_s=0.0)
            except BaseException as exc:  # a bug or a bad setting: reported with the row
                arm.error = exc
                if writers[i] is not None:
                    writers[i].close()
            finally:
                turns.finish(i)
                if lesson.interleaved:
                    turns.wait_all_finished()

        # Interleaved arms take turns, each in a thread of its own. Arms that run one after
        # the other (a process figure, the heap) do not overlap at all: the next arm builds
        # its model once the last has ended and let go of its own, where a model built or
        # freed during the other arm's steps moved that arm's heap under load.
        batches = ([list(enumerate(arms))] if lesson.interleaved
                   else [[(i, a)] for i, a in enumerate(arms)])
        try:
            for batch in batches:
                jobs = [pool.submit(work, i, a) for i, a in batch]
                try:
                    while not all(j.done() for j in jobs):  # timed waits: Ctrl-C reaches us
                        wait(jobs, timeout=0.2)
                except KeyboardInterrupt:  # the arms still to run start stopped
                    self.stop()
                    wait(jobs)
        finally:
            with self._lock:
                self._live = None
        for arm in arms:
            if arm.error is not None and not isinstance(arm.error, KeyboardInterrupt):
                from memlens.core.options import ConfigError

                if isinstance(arm.error, ConfigError):
                    raise arm.error
        return arms

    def _arm_folder(self, label: str, lesson: Lesson, arm: str) -> Path | None:
        """The arm's run folder in the report's, claimed as every run's is (choose_folder:
        one holding a run is refused); None for a report kept in memory."""
        from memlens.core.lessons.report_folder import RUNS, arm_folder_name
        from memlens.core.recorder.output import choose_folder

        if self.out is None:
            return None
        return choose_folder(self.out / RUNS / arm_folder_name(label, lesson.name, arm), label)

    def _round_judge(self, lesson: Lesson, arms: list[_Arm], controls: list[RunControls],
                     turns: Turns) -> Callable[[int, int], None]:
        """The TurnSinks' on_block: when a round is complete (every arm has run as many
        blocks) past the base steps, ask the plan for another; if not, both arms stop
        there. Runs in the arm thread whose block ended, while the other arm waits."""
        plan = AdaptiveBlocks(self.budget)
        base = self._base_steps(lesson)
        metrics = self._claimed_times(lesson)
        blocks = [0] * len(arms)

        def on_block(arm: int, steps_done: int) -> None:
            blocks[arm] = steps_done // self.block
            if len(set(blocks)) != 1 or steps_done < base:
                return
            figures = []
            for m in metrics:
                off, on = paired(read_metric(arms[0].history, m, self.block).rounds,
                                 read_metric(arms[1].history, m, self.block).rounds)
                figures.append((off, on, m.claim))
            spent_s = sum(_step_seconds(a.history) for a in arms)
            if not plan.another_round(figures, spent_s, blocks[arm]):
                for c in controls:
                    c.stop()
                turns.stop()

        return on_block

    def _rows(self, lesson: Lesson, preset: str, arms: list[_Arm], machine: Machine
              ) -> list[LessonRow]:
        by = {a.name: a for a in arms}
        env = by["off"].history.meta.get("environment", {})
        runs = {a.name: str(a.folder) if a.folder is not None else "" for a in arms}
        steps = {a.name: len(a.history.steps) for a in arms}
        note = _amp_note(lesson, env)
        rows = []
        for metric in lesson.metrics:
            off = read_metric(by["off"].history, metric, self.block)
            on = read_metric(by["on"].history, metric, self.block)
            row = self._row(lesson, preset_label(preset), env.get("device", ""), metric,
                            off, on, runs, steps, machine)
            unmeasured = ""
            if metric.reduce == "growth" and None in (off.value, on.value):
                arm = lesson.off_label if off.value is None else lesson.on_label
                unmeasured = (f"no two consecutive steps of the {arm} arm completed (the "
                              "others failed), so its growth per step was not measured")
            row.note = "; ".join(n for n in (
                note, BOUND_NOTE if row.verdict == LOWER_BOUND else "", unmeasured,
                metric.note, row.note) if n)
            row.machine = machine.as_dict()
            rows.append(row)
        return rows

    @staticmethod
    def _row(lesson: Lesson, preset: str, device: str, metric: Metric, off: Reading,
             on: Reading, runs: dict[str, str], steps: dict[str, int],
             machine: Machine | None = None) -> LessonRow:
        claim = metric.claim
        note = ""
        if metric.kind == "time":
            pairs = paired(off.rounds, on.rounds)
            ci = time_effect(*pairs, machine)
            d = ci.as_dict()
            change, low, high, significant = d["ratio"], d["ci_low"], d["ci_high"], \
                d["significant"]
            verdict = time_verdict(ci, claim)
            if len(pairs[0]) < MIN_TIME_BLOCKS:
                low = high = None
                significant = False
                verdict = TOO_FEW if verdict else ""
            elif verdict == "within noise" and claim is not None:
                note = ci.reason
            exact = False
        else:
            # a growth a step has no ratio worth showing (32 B against 9.8 KiB a step)
            growth = metric.reduce in ("growth", "median_growth")
            change = (on.value / off.value if off.value and on.value is not None
                      and not growth else None)
            low = high = None
            significant = (off.value is not None and on.value is not None
                           and abs(on.value - off.value)
                           > max(SAME * max(abs(off.value), abs(on.value)), metric.floor))
            verdict = exact_verdict(off.value, on.value, claim, metric.floor)
            exact = True
            if off.bound or on.bound:  # a lower bound: no verdict on it
                verdict = LOWER_BOUND if claim is not None else ""
                significant, exact = False, False
        return LessonRow(
            lesson=lesson.name, title=lesson.title, preset=preset, device=device,
            metric=metric.name, kind=metric.kind, off_label=lesson.off_label,
            on_label=lesson.on_label, off=off.value, on=on.value, change=change,
            ci_low=low, ci_high=high, significant=bool(significant), exact=exact,
            claim=claim.text if claim else "", verdict=verdict, runs=runs, steps=steps,
            note=note,
        )


def _step_seconds(history: RunHistory) -> float:
    """The arm's measured step time so far (eval included), in seconds."""
    import numpy as np

    ms = history.steps.column("step_ms")
    return float(np.nansum(ms)) / 1e3 if len(ms) else 0.0


def _load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the OS has none)."""
    import os

    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _report_environment(env: dict, load_start: list[float] | None) -> dict:
    """The report's environment: the first run's (torch, threads, the CPU: its model, ISA
    and whether bf16 is native), the same keys where no lesson ran, and the load average
    at the start and the end of the report (time figures are this machine's, at that load)."""
    import torch

    from memlens.core.cpu_support import cpu_info

    env = dict(env)
    env.setdefault("torch", torch.__version__)
    env.setdefault("threads", torch.get_num_threads())
    env.setdefault("cpu", cpu_info())
    env["load_average"] = {"start": load_start, "end": _load_average()}
    return env


def _amp_note(lesson: Lesson, env: dict) -> str:
    """For a bf16 lesson on a CPU without native bf16: that its figures are emulated bf16's."""
    if "bf16" not in (str(v) for v in lesson.on.values()) or not str(
            env.get("device", "")).startswith("cpu"):
        return ""
    from memlens.core.cpu_support import bf16_support

    return bf16_support().emulated_note()


def _batch_size(config: RunConfig) -> int:
    """The batch size the run uses: the setting, else the preset's default (a model file's:
    make_batch's default batch_size, read from its source)."""
    from memlens.core.options import ConfigError, is_model_file
    from memlens.core.presets import PRESET_CLASSES

    if config.batch_size:
        return config.batch_size
    if not is_model_file(config.preset):
        return PRESET_CLASSES[config.preset].defaults["batch_size"]
    from memlens.core.model_file import read_file_shape

    default = read_file_shape(config.preset).batch_size_default
    if default is None:
        raise ConfigError(f"{config.preset}: the accumulate lesson needs the batch size: set "
                          "batch_size in the file's CONFIG or with --set batch_size=N")
    return default
