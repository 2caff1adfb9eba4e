"""Watching a user's script: its step time watched vs unwatched, side by side, on the two
examples; and the app's follow latency, from a step row written to the plot holding it (run
with the GUI group, benchmarks/gui_load.py).

Two measurements of the overhead:
- in one process (benchmarks/_watch_probe.py): the example's `train_step` in blocks of steps,
  alternately plain and under `memlens.watch()`; each pair of neighbouring blocks is one
  ratio. The target is on this one: both sides share the process and the minutes.
- end to end, in pairs of processes, plain `python example.py` and `main.py watch` one after
  the other: the command a user types, startup aside. Context: on a shared machine one
  process's steps differ from the next one's by up to 20% for reasons of its own (its heap's
  page-fault regime, its core), so a few pairs cannot resolve 5%.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import ROOT, Figure, Settings, percentile, run_child
from memlens.core.stats import median_pair_ratio

# (example, its arguments, has the target): the examples at their own sizes (PyTorch's
# word_language_model's, and a DCGAN at CIFAR's size), and at toy sizes (--tiny: steps of
# a few ms; rnn_lm --micro: about 2 ms), where memlens's fixed cost a step shows most:
# reported, no target; and `mlp`, benchmarks/_mlp_step.py: a 2 ms step of the tutorials'
# loop (an MLP, Adam, a loss module), the shape most scripts have.
CASES = [("rnn_lm", [], True), ("dcgan", ["--sample-every", "10"], True),
         ("rnn_lm", ["--tiny"], False), ("dcgan", ["--sample-every", "10", "--tiny"], False),
         ("rnn_lm", ["--micro"], False), ("mlp", [], False)]
TOY_SIZES = {"--tiny": "toy sizes (--tiny)", "--micro": "a 2 ms step (--micro)"}
SCRIPTS = {"mlp": ROOT / "benchmarks" / "_mlp_step.py"}  # else examples/NAME.py
OVERHEAD_LIMIT = 1.05
FOLLOW_LIMIT_MS = 250.0
# A sharded job (examples/fsdp.py at the sizes of the sharded tests: FSDP2 on 2 processes,
# gloo), one process per rank, each rank's blocks alternately plain and watched in step
# with the other's (the collectives keep them so).
SHARDED_RANKS = 2
SHARDED_LIMIT = 1.10


def _env(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))


def _step_times(cmd: list[str], times: Path, threads: int) -> list[tuple[float, float]]:
    """Each step's (wall ms, the training thread's CPU ms), as the script timed them."""
    subprocess.run(cmd, cwd=ROOT, env=_env(threads), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return [(float(w), float(c)) for w, c in
            (line.split() for line in times.read_text().splitlines() if line.strip())]


def _median(values: list[float]) -> float:
    return percentile(values, 50)


def _block_step(times: list[float]) -> float:
    """A block's step: its mean (the block's time over its steps). Not its median: under
    detail=auto's schedule one step in N takes the detail, and a block's median step is one
    without it (the median left the detail's cost out of the figure)."""
    return sum(times) / len(times)


def _label(name: str, extra: list[str]) -> tuple[str, str]:
    for flag, size in TOY_SIZES.items():
        if flag in extra:
            return f"{name}_{flag[2:]}", size
    if name in SCRIPTS:
        return f"{name}_2ms", "a 2 ms step (an MLP with Adam)"
    return name, "own sizes"


def in_process(s: Settings) -> list[Figure]:
    """Blocks of steps alternately plain and watched in one process (see module doc)."""
    blocks = 6 if s.quick else max(24, 2 * s.reps)
    out = []
    for name, extra, target in CASES:
        if s.quick and not target:
            continue  # the smoke run: the targets only
        short = name in SCRIPTS or set(TOY_SIZES) & set(extra)
        per_block = 12 if short else 8
        script = SCRIPTS.get(name, ROOT / "examples" / f"{name}.py")
        cmd = [sys.executable, "-m", "benchmarks._watch_probe", str(script), str(blocks),
               str(per_block), "--", *extra]
        done = subprocess.run(cmd, cwd=ROOT, env=_env(s.threads), check=True,
                              capture_output=True, text=True)
        times = json.loads(done.stdout.strip().splitlines()[-1])
        label, size = _label(name, extra)
        for key, what, suffix in (("", "step time", ""), ("_cpu", "thread CPU time", "_cpu")):
            a = [_block_step(b) for b in times[f"plain{key}"]]
            b = [_block_step(b) for b in times[f"watched{key}"]]
            ci = median_pair_ratio(a, b)
            pa, pb = _median(a), _median(b)
            out.append(Figure(
                f"watch_overhead_{label}{suffix}",
                f"watch: {name} at {size}, {what}, watched / plain (one process)", ci.ratio,
                "x", OVERHEAD_LIMIT if target and not key else None,
                note=f"95% CI {ci.low:.3f}-{ci.high:.3f} over {blocks} pairs of blocks of "
                     f"{per_block} steps (a block's mean step); plain {pa:.2f} ms, watched "
                     f"{pb:.2f} ms ({(pb - pa) * 1e3:+.0f} us a step)"))
            if not key:
                out.append(_toggles_figure(times, label, name, size, blocks, per_block))
    return out


def _toggles_figure(times: dict, label: str, name: str, size: str, blocks: int,
                    per_block: int) -> Figure:
    """A watch where toggles may come (its interventions made and consulted, nothing
    overridden) over one without any: what being able to toggle costs a step."""
    a = [_block_step(b) for b in times["watched"]]
    b = [_block_step(b) for b in times["toggles"]]
    ci = median_pair_ratio(a, b)
    pa, pb = _median(a), _median(b)
    return Figure(
        f"watch_toggles_idle_{label}",
        f"watch: {name} at {size}, step time, toggles possible / none (one process)",
        ci.ratio, "x", None,
        note=f"95% CI {ci.low:.3f}-{ci.high:.3f} over {blocks} pairs of blocks of "
             f"{per_block} steps (a block's mean step); {pa:.2f} ms without, {pb:.2f} ms with "
             f"({(pb - pa) * 1e3:+.0f} us a step)")


def sharded(s: Settings) -> list[Figure]:
    """examples/fsdp.py under torchrun, each rank in alternating blocks in its own process
    (benchmarks/_watch_probe.py --out); a figure per rank, its ratio with its interval."""
    blocks, per_block = (6, 10) if s.quick else (max(24, 2 * s.reps), 10)
    with tempfile.TemporaryDirectory(prefix="memlens-sharded-bench-") as tmp:
        probe = Path(tmp) / "probe"
        torchrun = Path(sys.executable).parent / "torchrun"
        cmd = [str(torchrun), "--nproc_per_node", str(SHARDED_RANKS), "--master_port",
               str(_free_port()), "-m", "benchmarks._watch_probe",
               str(ROOT / "examples" / "fsdp.py"), str(blocks), str(per_block),
               "--out", str(probe)]
        subprocess.run(cmd, cwd=ROOT, env=_env(s.threads), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ranks = [json.loads(Path(f"{probe}{r}").read_text()) for r in range(SHARDED_RANKS)]
    out = []
    for rank, times in enumerate(ranks):
        a = [_block_step(b) for b in times["plain"]]
        b = [_block_step(b) for b in times["watched"]]
        ci = median_pair_ratio(a, b)
        pa, pb = _median(a), _median(b)
        out.append(Figure(
            f"watch_overhead_fsdp2_rank{rank}",
            f"watch: FSDP2 at the tests' sizes, rank {rank} of {SHARDED_RANKS}, watched / plain",
            ci.ratio, "x", SHARDED_LIMIT,
            note=f"95% CI {ci.low:.3f}-{ci.high:.3f} over {blocks} pairs of blocks of "
                 f"{per_block} steps (a block's mean step), one process per rank (gloo); plain "
                 f"{pa:.2f} ms, watched {pb:.2f} ms ({(pb - pa) * 1e3:+.0f} us a step)"))
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def end_to_end(s: Settings) -> list[Figure]:
    """Pairs of processes, `python example.py` and `main.py watch example.py` one after the
    other (which goes first alternates); each process's median step; the median of the
    pairs' ratios with a bootstrap over the pairs (core.stats.median_pair_ratio)."""
    pairs = 3 if s.quick else max(6, s.reps // 2)
    out = []
    for name, extra, target in CASES:
        if not target:
            continue
        steps, skip = 40, 8
        script = str(ROOT / "examples" / f"{name}.py")
        plain: list[float] = []
        watched: list[float] = []
        with tempfile.TemporaryDirectory(prefix="memlens-watch-bench-") as tmp:
            t = Path(tmp) / "times.txt"
            args = ["--steps", str(steps), "--times", str(t), *extra]
            for rep in range(pairs):
                sides = [("plain", [sys.executable, script, *args]),
                         ("watched", [sys.executable, str(ROOT / "main.py"), "watch", script,
                                      "--out", str(Path(tmp) / f"run{rep}"), "--", *args])]
                for side, cmd in (sides if rep % 2 == 0 else sides[::-1]):
                    step_ms = _median([w for w, _ in _step_times(cmd, t, s.threads)[skip:]])
                    (plain if side == "plain" else watched).append(step_ms)
        ci = median_pair_ratio(plain, watched)
        pa, pb = _median(plain), _median(watched)
        label, size = _label(name, extra)
        out.append(Figure(
            f"watch_end_to_end_{label}",
            f"watch: {name} at {size}, main.py watch / plain, in pairs of processes",
            ci.ratio, "x", None,
            note=f"95% CI {ci.low:.3f}-{ci.high:.3f} over {pairs} pairs of processes, "
                 f"{steps - skip} steps each; median plain {pa:.2f} ms, watched {pb:.2f} ms"))
    return out


def follow_latency(s: Settings) -> list[Figure]:
    """A RunWriter in this process appends step rows; the window follows the folder."""
    from PySide6.QtWidgets import QApplication

    from memlens.app.window.main_window import MainWindow
    from memlens.core.records import MemorySample, StepRecord
    from memlens.core.runfolder.writer import RunWriter

    app = QApplication.instance() or QApplication([])
    lat: list[float] = []
    with tempfile.TemporaryDirectory(prefix="memlens-follow-bench-") as tmp:
        w = RunWriter(Path(tmp) / "run")
        w.on_start({"source": "watch", "pid": os.getpid()})
        window = MainWindow(runs_dir=None)
        window.show()
        window.follow_run(Path(tmp) / "run")
        curve = window.plots.loss_plot.curves["loss"]
        for i in range(10 if s.quick else 40):
            sample = MemorySample(i, "forward", i, 100, 0, 0, 10, 0)
            t0 = time.perf_counter()
            w.on_steps([(StepRecord(i, i, 1.0, 1.0, 1, 0, 0, 0, 0, 0, 100, 110, None, 1, 10, 0),
                         [sample])])
            while len(curve.getData()[0] if curve.getData()[0] is not None else ()) < i + 1:
                app.processEvents()
                time.sleep(0.001)
                if time.perf_counter() - t0 > 5:
                    break
            lat.append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.05)  # rows arrive at step rate, not all at once
        window.close()
        w.on_finish({})
    return [Figure("follow_latency_p50_ms", "follow: row written -> plot, median",
                   percentile(lat, 50), "ms", FOLLOW_LIMIT_MS,
                   note=f"max {max(lat):.0f} ms over {len(lat)} rows"),
            Figure("follow_latency_max_ms", "follow: row written -> plot, max", max(lat), "ms",
                   FOLLOW_LIMIT_MS)]


def python_per_step(_s: Settings) -> list[Figure]:
    """memlens's Python a step runs on the training thread, counted in bytecode instructions
    (benchmarks/_instructions_probe.py): the same on any machine and under any load."""
    rc, counts = run_child(["benchmarks._instructions_probe"])
    if counts is None:
        raise RuntimeError(f"counting memlens's Python a step failed (exit status {rc})")
    labels = {"watch_mlp_no_detail": "watch: the 2 ms MLP step, steps without the detail",
              "watch_mlp_auto": "watch: the 2 ms MLP step, detail=auto",
              "lab_mlp_light": "lab: mlp preset, light", "lab_gan_light": "lab: gan preset, light"}
    out = []
    for case, label in labels.items():
        c = counts[case]
        top = ", ".join(f"{name} {n:.0f}" for name, n in c["top"][:4])
        out.append(Figure(f"python_per_step_{case}", f"{label}: memlens bytecode a step",
                          c["instructions"], "instr",
                          note=f"{c['calls']:.0f} calls a step; most in {top}"
                          + (f"; chose {c['chosen']}" if "chosen" in c else "")))
    return out


def run(s: Settings) -> list[Figure]:
    # (the follow latency is measured with the GUI group, gui_load)
    return in_process(s) + python_per_step(s) + sharded(s) + end_to_end(s)
