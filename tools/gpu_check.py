"""Every CUDA path of memlens, checked on a GPU machine that has only Python, torch, numpy, pytest.

    python tools/gpu_check.py [--out DIR] [--only NAME ...] [--list] [--dry-run]

No Qt, no package index, no pytest plugins: the CUDA tests run with plugin autoload off, and
the in-process checks use core/ only. Each check compares memlens's figures with plain torch
read at the same instant, not with memlens's own functions. A summary (text and JSON) goes
to --out, default $OUT when set. Exit 0 all passed; 1 a check failed, or no CUDA GPU; 2 bad
arguments. --dry-run does the CPU side only (imports, argument handling, collecting the
tests), so this script can be checked on a machine without a GPU. See docs/gpu-check.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = ("tests/core/test_cuda.py", "tests/core/test_cuda_recorder.py")
PRESETS = ("mlp", "cnn", "lstm", "gan", "transformer")
QT_MODULES = ("PySide6", "shiboken6", "pyqtgraph", "pytestqt")
EXIT_OK, EXIT_FAILED, EXIT_BAD_ARGS = 0, 1, 2
WATCH_SCRIPT = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 1)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(8):
    opt.zero_grad()
    x = torch.randn(32, 64, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
print("final loss", repr(loss.item()))
"""


class CheckFailed(Exception):
    """A check's finding, with the figures measured so far."""

    def __init__(self, message: str, figures: dict | None = None) -> None:
        super().__init__(message)
        self.figures = figures or {}


def _env() -> dict:
    # Plugin autoload off: the CUDA tests must need nothing beyond pytest itself.
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTHONDONTWRITEBYTECODE": "1"}


def _run(cmd: list[str], timeout: float, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# --- the checks ---------------------------------------------------------------------------------


def check_pytest(out: Path, dry_run: bool) -> dict:
    """The CUDA tests (test_cuda.py, test_cuda_recorder.py); on a GPU none of test_cuda skips."""
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            "-rs", *TEST_FILES]
    if dry_run:
        done = _run([*base, "--collect-only"], 300)
        collected = [ln for ln in done.stdout.splitlines() if "::" in ln]
        if done.returncode != 0 or not collected:
            raise CheckFailed(f"collecting the CUDA tests failed:\n{_tail(done.stdout)}")
        return {"collected": len(collected)}
    xml = out / "gpu_check_pytest.xml"
    done = _run([*base, f"--junitxml={xml}"], 1200)
    (out / "gpu_check_pytest.txt").write_text(done.stdout + done.stderr)
    per_file: dict[str, dict] = {}
    for case in ET.parse(xml).getroot().iter("testcase") if xml.exists() else ():
        name = case.get("classname", "").rsplit(".", 1)[-1] or "?"
        counts = per_file.setdefault(name, {"passed": 0, "failed": 0, "skipped": 0})
        kinds = {child.tag for child in case}
        kind = ("failed" if kinds & {"failure", "error"} else
                "skipped" if "skipped" in kinds else "passed")
        counts[kind] += 1
    figures = {"files": per_file, "returncode": done.returncode}
    if done.returncode != 0:
        raise CheckFailed(f"pytest exit {done.returncode}:\n{_tail(done.stdout)}", figures)
    if per_file.get("test_cuda", {}).get("skipped"):
        raise CheckFailed("tests/core/test_cuda.py skipped tests on a GPU machine:\n"
                          + _tail(done.stdout), figures)
    return figures


class _AllocatorWitness:
    """Reads torch.cuda's own counters the moment memlens takes a sample (its probe's sample
    wrapped: samples of short steps reach a sink only at the step's end) and as each step's
    row is handed on."""

    def __init__(self, torch, device) -> None:
        self.torch, self.device = torch, device
        self.samples = self.steps = 0
        self.worst_allocated = self.worst_reserved = 0  # largest |memlens - torch|
        self.problems: list[str] = []
        self.first_params: int | None = None
        self.peak = self.reserved = 0

    def on_start(self, meta): pass
    def on_samples(self, items): pass
    def on_event(self, event): pass
    def on_graph(self, snapshot): pass
    def on_allocations(self, rows): pass
    def on_cuda_snapshot(self, recorder): pass
    def on_finish(self, summary): pass

    def watching(self):
        """A context in which every MemoryProbe.sample is checked as it is taken."""
        import contextlib

        from memlens.core.recorder.probe import MemoryProbe

        original = MemoryProbe.sample

        def sample(probe, *args, **kwargs):
            s = original(probe, *args, **kwargs)
            self._sampled(s)
            return s

        @contextlib.contextmanager
        def patched():
            MemoryProbe.sample = sample
            try:
                yield
            finally:
                MemoryProbe.sample = original

        return patched()

    def on_steps(self, rows) -> None:
        for r, _ in rows:
            self._step(r)

    def _sampled(self, s) -> None:
        cuda = self.torch.cuda
        self.samples += 1
        if self.first_params is None:
            self.first_params = s.params
        self.worst_allocated = max(self.worst_allocated,
                                   abs((s.allocated or 0) - cuda.memory_allocated(self.device)))
        self.worst_reserved = max(self.worst_reserved,
                                  abs((s.reserved or 0) - cuda.memory_reserved(self.device)))

    def _step(self, r) -> None:
        cuda = self.torch.cuda
        self.steps += 1
        self.peak, self.reserved = max(self.peak, r.peak_bytes), max(self.reserved,
                                                                     r.reserved_bytes or 0)
        if r.peak_bytes > cuda.max_memory_allocated(self.device):
            self.problems.append(f"step {r.step}: peak {r.peak_bytes} > torch's "
                                 f"max_memory_allocated {cuda.max_memory_allocated(self.device)}")
        if not (r.peak_bytes >= r.allocated_bytes > 0):
            self.problems.append(f"step {r.step}: peak {r.peak_bytes} < allocated "
                                 f"{r.allocated_bytes}, or nothing allocated")
        if (r.reserved_bytes or 0) < r.allocated_bytes:
            self.problems.append(f"step {r.step}: reserved {r.reserved_bytes} < allocated")


def check_allocator(out: Path, dry_run: bool) -> dict:
    """Allocated, reserved, peak and params against torch.cuda's counters, every preset.

    allocated / reserved at every sample equal torch.cuda.memory_allocated / reserved read at
    that instant; each step's peak is at most torch's max_memory_allocated and at least its
    allocated; the params category equals the parameters' storage bytes counted on torch."""
    import torch

    from memlens.core.loop import run_training
    from memlens.core.preset_factory import build_preset
    from tests.core.helpers import tiny_config

    if dry_run:
        return {"presets": list(PRESETS)}
    device = torch.device("cuda")
    figures, problems = {}, []
    for preset in PRESETS:
        config = tiny_config(preset, steps=6, device="cuda", eval_every=3)
        witness = _AllocatorWitness(torch, device)
        with witness.watching():
            summary = run_training(config, sink=witness)
        model = build_preset(config, device)
        storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes()
                    for p in model.parameters()}
        param_bytes = sum(storages.values())
        del model
        figures[preset] = {"steps": witness.steps, "samples": witness.samples,
                           "peak_bytes": witness.peak, "reserved_bytes": witness.reserved,
                           "params_bytes": witness.first_params, "params_torch": param_bytes,
                           "max_diff_allocated": witness.worst_allocated,
                           "max_diff_reserved": witness.worst_reserved}
        if summary.stopped_by != "completed":
            problems.append(f"{preset}: stopped by {summary.stopped_by}: {summary.error}")
        if witness.worst_allocated or witness.worst_reserved:
            problems.append(f"{preset}: allocated/reserved differ from torch.cuda's by up to "
                            f"{witness.worst_allocated}/{witness.worst_reserved} bytes")
        if witness.first_params != param_bytes:
            problems.append(f"{preset}: params {witness.first_params} B, torch counts "
                            f"{param_bytes} B")
        problems += [f"{preset}: {p}" for p in witness.problems[:3]]
    if problems:
        raise CheckFailed("; ".join(problems), figures)
    return figures


def check_snapshot(out: Path, dry_run: bool) -> dict:
    """cuda_snapshot_steps writes PyTorch's recording, and torch.cuda._memory_viz reads it.

    A CLI run (`main.py run ... --export all`); `python -m torch.cuda._memory_viz trace_plot`
    and `stats` on the snapshot it wrote."""
    run_dir = out / "gpu_check_snapshot_run"
    cmd = [sys.executable, "main.py", "run", "--preset", "mlp", "--steps", "6", "--quiet",
           "--set", "device=cuda", "cuda_snapshot_start=2", "cuda_snapshot_steps=2",
           "batch_size=32", "width=64", "--export", "all", "--out", str(run_dir)]
    if dry_run:
        done = _run([sys.executable, "main.py", "run", "--help"], 120)
        if done.returncode != 0 or "--export" not in done.stdout:
            raise CheckFailed(f"main.py run --help failed:\n{_tail(done.stderr)}")
        return {"command": " ".join(cmd[1:])}
    done = _run(cmd, 600)
    if done.returncode != 0:
        raise CheckFailed(f"memlens run exit {done.returncode}:\n{_tail(done.stderr)}")
    from memlens.core.runfolder.format import CUDA_SNAPSHOT

    snapshot = run_dir / CUDA_SNAPSHOT
    if not snapshot.exists():
        raise CheckFailed(f"no {CUDA_SNAPSHOT} in {run_dir}: {sorted(os.listdir(run_dir))}")
    with snapshot.open("rb") as f:  # written by the run above, on this machine
        data = pickle.load(f)
    actions = [e.get("action") for trace in data.get("device_traces", []) for e in trace]
    figures = {"bytes": snapshot.stat().st_size, "trace_entries": len(actions),
               "allocs": actions.count("alloc"), "frees": actions.count("free_completed")}
    if not figures["allocs"]:
        raise CheckFailed("the CUDA snapshot recorded no allocation", figures)
    html = out / "gpu_check_snapshot.html"
    viz = [sys.executable, "-m", "torch.cuda._memory_viz"]
    for args in (["trace_plot", str(snapshot), "-o", str(html)], ["stats", str(snapshot)]):
        done = _run(viz + args, 300)
        if done.returncode != 0:
            raise CheckFailed(f"_memory_viz {args[0]} exit {done.returncode}:\n"
                              f"{_tail(done.stderr)}", figures)
        if args[0] == "stats":
            figures["stats_head"] = done.stdout.strip().splitlines()[:3]
    figures["html_bytes"] = html.stat().st_size if html.exists() else 0
    if figures["html_bytes"] < 1000:
        raise CheckFailed("_memory_viz trace_plot wrote no page", figures)
    exported = run_dir / "snapshot.pickle"
    figures["export_snapshot"] = exported.exists()
    return figures


def check_amp(out: Path, dry_run: bool) -> dict:
    """AMP: fp16 with GradScaler, bf16, and fp16 switched on live.

    The runs complete with finite losses, and torch.amp.GradScaler.step is called once per
    fp16 optimizer step (counted on torch's class, not by memlens)."""
    import torch

    from memlens.core.loop import run_training
    from tests.core.helpers import tiny_config

    if dry_run:
        return {"runs": ["cnn fp16", "cnn bf16", "mlp off->fp16 at step 3"]}
    scaler_steps = 0
    real_step = torch.amp.GradScaler.step

    def counting_step(self, *args, **kwargs):
        nonlocal scaler_steps
        scaler_steps += 1
        return real_step(self, *args, **kwargs)

    class Losses:
        def __init__(self): self.losses = []
        def on_steps(self, rows): self.losses += [r.loss for r, _ in rows]
        def __getattr__(self, name): return lambda *a: None

    figures, problems = {}, []
    runs = (("cnn fp16", tiny_config("cnn", steps=6, device="cuda", amp="fp16"), 6),
            ("cnn bf16", tiny_config("cnn", steps=6, device="cuda", amp="bf16"), 0),
            ("mlp off->fp16 at step 3",
             tiny_config("mlp", steps=6, device="cuda", at=("3:amp=fp16",)), 3))
    torch.amp.GradScaler.step = counting_step
    try:
        for name, config, expected_scaler_steps in runs:
            scaler_steps = 0
            sink = Losses()
            summary = run_training(config, sink=sink)
            figures[name] = {"stopped_by": summary.stopped_by, "losses": sink.losses,
                             "grad_scaler_steps": scaler_steps}
            if summary.stopped_by != "completed":
                problems.append(f"{name}: stopped by {summary.stopped_by}: {summary.error}")
            if len(sink.losses) != 6 or not all(map(math.isfinite, sink.losses)):
                problems.append(f"{name}: losses {sink.losses}")
            if scaler_steps != expected_scaler_steps:
                problems.append(f"{name}: GradScaler.step called {scaler_steps} times, "
                                f"expected {expected_scaler_steps}")
    finally:
        torch.amp.GradScaler.step = real_step
    if problems:
        raise CheckFailed("; ".join(problems), figures)
    return figures


def watch_available() -> bool:
    return any((ROOT / "memlens" / "core").glob("watch*"))


def check_watch(out: Path, dry_run: bool) -> dict | None:
    """`main.py watch` on a CUDA script (skipped where this tree has no watch command).

    It records at least the script's 8 steps, and the script prints the same loss, bit for
    bit, as without memlens. None (skipped) where core/watch* does not exist."""
    if not watch_available():
        return None
    work = out / "gpu_check_watch"
    work.mkdir(parents=True, exist_ok=True)
    script = work / "train_cuda.py"
    script.write_text(WATCH_SCRIPT)
    if dry_run:
        done = _run([sys.executable, "main.py", "watch", "--help"], 120)
        if done.returncode != 0:
            raise CheckFailed(f"main.py watch --help exit {done.returncode}:\n"
                              f"{_tail(done.stderr)}")
        return {"script": str(script)}
    plain = _run([sys.executable, str(script)], 300, cwd=work)
    watched = _run([sys.executable, str(ROOT / "main.py"), "watch", str(script), "--out",
                    str(work / "run")], 600, cwd=work)
    figures = {"plain_exit": plain.returncode, "watch_exit": watched.returncode,
               "plain": _tail(plain.stdout, 1), "watched": _tail(watched.stdout, 1)}
    if plain.returncode != 0 or watched.returncode != 0:
        raise CheckFailed(f"exit {plain.returncode} plain, {watched.returncode} watched:\n"
                          f"{_tail(watched.stderr)}", figures)
    if figures["plain"] != figures["watched"]:
        raise CheckFailed("the watched script's result differs from the plain run", figures)
    steps = next((work / "run").rglob("steps.csv"), None)
    if steps is None:
        raise CheckFailed("watch wrote no steps.csv", figures)
    import csv

    with steps.open(newline="") as f:
        rows = list(csv.DictReader(f))
    figures["steps_rows"] = len(rows)
    allocated = [int(float(r["allocated_bytes"])) for r in rows if r.get("allocated_bytes")]
    figures["allocated_min"] = min(allocated) if allocated else None
    if len(rows) < 8 or (allocated and min(allocated) <= 0):
        raise CheckFailed("watch recorded fewer than 8 steps, or no CUDA allocation", figures)
    return figures


WATCH_SYNC_SCRIPT = """\
import json
import warnings
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 1)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(32, 64, device="cuda")
losses = []
torch.cuda.set_sync_debug_mode("warn")  # every op that makes the CPU wait for the GPU
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for step in range(8):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
torch.cuda.set_sync_debug_mode(0)
print("syncs", json.dumps(sorted({f"{w.filename}:{w.lineno}" for w in caught
                                  if "synchroniz" in str(w.message)})))
print("losses", json.dumps(torch.stack(losses).tolist()))
"""


def _printed(stdout: str, key: str):
    line = next((x for x in stdout.splitlines() if x.startswith(key + " ")), None)
    return None if line is None else json.loads(line[len(key) + 1:])


def check_watch_sync(out: Path, dry_run: bool) -> dict | None:
    """`main.py watch` never makes a step wait for the GPU: a script whose steps queue their
    work without reading anything back runs under torch.cuda.set_sync_debug_mode("warn"),
    and no synchronizing op is made from memlens's files (it reads a step's loss and grad
    norm from pinned copies at the step's end: core/watch/device_reads.py); steps.csv's
    losses are the script's own, and its result is the plain run's, bit for bit."""
    if not (ROOT / "memlens" / "core" / "watch" / "device_reads.py").exists():
        return None
    work = out / "gpu_check_watch_sync"
    work.mkdir(parents=True, exist_ok=True)
    script = work / "train_sync.py"
    script.write_text(WATCH_SYNC_SCRIPT)
    if dry_run:  # the script at least parses
        compile(WATCH_SYNC_SCRIPT, str(script), "exec")
        return {"script": str(script)}
    plain = _run([sys.executable, str(script)], 300, cwd=work)
    watched = _run([sys.executable, str(ROOT / "main.py"), "watch", str(script), "--out",
                    str(work / "run")], 600, cwd=work)
    figures = {"plain_exit": plain.returncode, "watch_exit": watched.returncode,
               "plain_syncs": _printed(plain.stdout, "syncs"),
               "watched_syncs": _printed(watched.stdout, "syncs")}
    if plain.returncode != 0 or watched.returncode != 0:
        raise CheckFailed(f"exit {plain.returncode} plain, {watched.returncode} watched:\n"
                          f"{_tail(watched.stderr)}", figures)
    package = str(ROOT / "memlens") + os.sep  # a sync made from memlens's own code
    ours = [s for s in figures["watched_syncs"] or [] if s.startswith(package)]
    figures["memlens_syncs"] = ours
    if ours:
        raise CheckFailed("memlens made the script wait for the GPU inside its steps", figures)
    losses = _printed(plain.stdout, "losses")
    if losses != _printed(watched.stdout, "losses"):
        raise CheckFailed("the watched script's losses differ from the plain run's", figures)
    steps = next((work / "run").rglob("steps.csv"), None)
    if steps is None:
        raise CheckFailed("watch wrote no steps.csv", figures)
    import csv

    with steps.open(newline="") as f:
        recorded = [float(r["loss"]) for r in csv.DictReader(f)]
    figures["losses"], figures["recorded"] = losses, recorded
    if len(recorded) != len(losses) or any(
            not math.isclose(a, b, rel_tol=1e-5) for a, b in zip(recorded, losses, strict=True)):
        raise CheckFailed("steps.csv's losses are not the script's", figures)
    return figures


def check_watch_amp(out: Path, dry_run: bool) -> dict | None:
    """`main.py watch --at 3:amp=fp16` on the CUDA script: CUDA autocast fp16 with memlens's
    GradScaler around backward and the optimizer step (core/watch/amp_override.py), which
    no CPU run can reach: the toggle applies (no refusal), the script's losses stay finite,
    AMP's weight copies appear from step 3. None (skipped) where watch has no toggles."""
    if not (ROOT / "memlens" / "core" / "watch" / "amp_override.py").exists():
        return None
    work = out / "gpu_check_watch_amp"
    work.mkdir(parents=True, exist_ok=True)
    script = work / "train_cuda.py"
    script.write_text(WATCH_SCRIPT.replace("    opt.step()\n",
                                           "    opt.step()\n    print(step, loss.item())\n"))
    if dry_run:
        return {"script": str(script)}
    done = _run([sys.executable, str(ROOT / "main.py"), "watch", "--at", "3:amp=fp16",
                 str(script), "--out", str(work / "run")], 600, cwd=work)
    figures = {"exit": done.returncode, "out": _tail(done.stdout, 3)}
    if done.returncode != 0:
        raise CheckFailed(f"exit {done.returncode}:\n{_tail(done.stderr)}", figures)
    import csv

    doc = json.loads(next((work / "run").rglob("run.json")).read_text())
    kinds = [(e["kind"], e.get("key"), e.get("new")) for e in doc["events"]
             if e["kind"] in ("toggle", "refused")]
    with next((work / "run").rglob("memory.csv")).open(newline="") as f:
        casts = {int(r["step"]): int(float(r["amp_casts_bytes"])) for r in csv.DictReader(f)
                 if r["phase"] == "forward"}
    losses = [float(ln.split()[1]) for ln in done.stdout.splitlines()
              if ln[:1].isdigit()]
    figures.update(events=kinds, amp_casts=casts, losses=losses)
    if kinds != [("toggle", "amp", "fp16")]:
        raise CheckFailed("amp=fp16 did not apply as one toggle", figures)
    if len(losses) != 8 or not all(map(math.isfinite, losses)):
        raise CheckFailed("the losses under fp16 with the scaler are not 8 finite ones", figures)
    if any(casts.get(s, 0) for s in range(3)) or not all(casts.get(s, 0) > 0
                                                         for s in range(3, 8)):
        raise CheckFailed("AMP's weight copies not where fp16 ran (from step 3 only)", figures)
    return figures


FSDP_WIDTH, FSDP_BLOCKS = 256, 3  # examples/fsdp.py's blocks, wider than its CPU default


def _fsdp_param_bytes(width: int, blocks: int) -> int:
    """examples/fsdp.py's float32 parameters: inp (8 -> width), the blocks, out (width -> 1);
    on one rank its shard is all of them."""
    return 4 * ((8 + 1) * width + blocks * (width + 1) * width + width + 1)


def check_fsdp(out: Path, dry_run: bool) -> dict | None:
    """FSDP2 under `main.py watch` (torchrun, world size 1, NCCL, fully_shard on each block).

    examples/fsdp.py prints the same final loss, bit for bit, watched and plain; every step is
    recorded; params (the rank's shard; one rank: the whole model) equals the parameters'
    bytes counted here; FSDP's gathered parameters are seen inside the phases and freed by
    the optimizer's row; on CUDA each row's allocated bytes hold at least the categories'
    tensors. --dry-run runs the watched job alone on CPU (gloo), 3 steps, and checks its
    figures. None (skipped) without watch."""
    if not watch_available():
        return None
    work = out / "gpu_check_fsdp"
    work.mkdir(parents=True, exist_ok=True)
    steps = 3 if dry_run else 8
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--standalone",
                "--nproc_per_node", "1"]
    args = ["--steps", str(steps), "--width", str(FSDP_WIDTH), "--blocks", str(FSDP_BLOCKS)]
    example = str(ROOT / "examples" / "fsdp.py")
    watched = _run([*torchrun, str(ROOT / "main.py"), "watch", "--out", str(work / "run"),
                    example, *args], 600, cwd=work)
    plain = watched if dry_run else _run([*torchrun, example, *args], 600, cwd=work)
    figures = {"plain_exit": plain.returncode, "watch_exit": watched.returncode,
               "plain": _tail(plain.stdout, 1), "watched": _tail(watched.stdout, 1)}
    if plain.returncode != 0 or watched.returncode != 0:
        raise CheckFailed(f"exit {plain.returncode} plain, {watched.returncode} watched:\n"
                          f"{_tail(plain.stderr + watched.stderr)}", figures)
    if figures["plain"] != figures["watched"] or "loss" not in figures["plain"]:
        raise CheckFailed("the watched job's final loss differs from the plain run", figures)
    import csv

    run = work / "run"
    doc = json.loads((run / "run.json").read_text())
    with (run / "steps.csv").open(newline="") as f:
        figures["steps_rows"] = len(list(csv.DictReader(f)))
    with (run / "memory.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] != "start"]
    figures.update(sharding=(doc.get("sharding") or {}).get("kind"),
                   params=sorted({int(r["params_bytes"]) for r in rows}),
                   expected_params=_fsdp_param_bytes(FSDP_WIDTH, FSDP_BLOCKS),
                   gathered_max=max(int(r["gathered_bytes"]) for r in rows),
                   gathered_after_step=[int(r["gathered_bytes"]) for r in rows
                                        if r["phase"] == "optimizer"],
                   device=doc["environment"]["device"])
    problems = []
    if figures["steps_rows"] != steps or figures["sharding"] != "fsdp2":
        problems.append(f"{figures['steps_rows']} steps of {steps}, sharding "
                        f"{figures['sharding']}")
    if figures["params"] != [figures["expected_params"]]:
        problems.append("params is not the parameters' bytes")
    if not figures["gathered_max"] or any(figures["gathered_after_step"]):
        problems.append("no gathered parameters seen, or not freed after the step")
    if not dry_run:
        short = [r for r in rows if int(r["allocated_bytes"] or 0) < sum(
            int(r[f"{c}_bytes"]) for c in ("params", "grads", "optimizer", "gathered"))]
        figures["rows_allocated_below_categories"] = len(short)
        if short or not figures["device"].startswith("cuda"):
            problems.append("a row's allocated bytes hold less than its categories, or the "
                            "run was not on CUDA")
    if problems:
        raise CheckFailed("; ".join(problems), figures)
    return figures


CHECKS = {"pytest": check_pytest, "allocator": check_allocator, "snapshot": check_snapshot,
          "amp": check_amp, "watch": check_watch, "watch_sync": check_watch_sync,
          "watch_amp": check_watch_amp,
          "fsdp": check_fsdp}


# --- running them ------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", metavar="DIR", default=os.environ.get("OUT") or None,
                   help="where the summary and artefacts go (default: $OUT, else a temp folder)")
    p.add_argument("--only", nargs="+", metavar="NAME", choices=list(CHECKS),
                   help=f"run only these checks ({', '.join(CHECKS)})")
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU side only: imports, arguments, collecting the tests; no GPU needed")
    return p.parse_args(argv)


def environment() -> dict:
    import numpy
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "numpy": numpy.__version__,
           "cuda_available": torch.cuda.is_available()}
    if env["cuda_available"]:
        env["device"] = torch.cuda.get_device_name(0)
    return env


def qt_loaded() -> list[str]:
    return sorted(m for m in sys.modules if m.split(".")[0] in QT_MODULES)


def write_summary(out: Path, summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=1, default=str))
    lines = [f"gpu_check {'dry run' if summary['dry_run'] else ''}: {summary['result']}",
             "environment: " + ", ".join(f"{k}={v}" for k, v in summary["environment"].items())]
    for name, r in summary["checks"].items():
        lines.append(f"{r['status'].upper():5} {name} ({r['seconds']:.1f} s): {r['detail']}")
    (out / "gpu_check.txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse: --help is 0, a bad argument 2
        return EXIT_OK if exc.code in (0, None) else EXIT_BAD_ARGS
    if args.list:
        for name, fn in CHECKS.items():
            print(f"{name:10} {fn.__doc__.split(chr(10))[0]}")
        return EXIT_OK
    sys.path.insert(0, str(ROOT))
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="memlens-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    summary = {"dry_run": args.dry_run, "environment": env, "checks": {}, "out": str(out)}
    if not args.dry_run and not env["cuda_available"]:
        summary["result"] = "no CUDA GPU"
        write_summary(out, summary)
        print(f"gpu_check: no CUDA GPU: torch {env['torch']} (built for CUDA "
              f"{env['torch_cuda']}) sees none. Run it on the GPU machine, or --dry-run here "
              "for the CPU side only.", file=sys.stderr)
        return EXIT_FAILED
    failed = False
    for name in args.only or CHECKS:
        t0 = time.perf_counter()
        try:
            figures = CHECKS[name](out, args.dry_run)
            status = "skip" if figures is None else "pass"
            detail = ("watch is not in this tree (no core/watch*)" if figures is None
                      else json.dumps(figures, default=str))
        except CheckFailed as exc:
            status, detail, figures = "fail", str(exc), exc.figures
        except Exception as exc:  # a check that breaks is a failure with its reason, not a crash
            status, detail, figures = "fail", f"{type(exc).__name__}: {exc}", {}
        failed |= status == "fail"
        summary["checks"][name] = {"status": status, "detail": detail, "figures": figures,
                                   "seconds": time.perf_counter() - t0}
        print(f"{status.upper():5} {name}: {detail[:400]}", flush=True)
    summary["qt_modules_loaded"] = qt_loaded()
    if summary["qt_modules_loaded"]:
        failed = True
        print(f"FAIL  Qt was imported: {summary['qt_modules_loaded']}", flush=True)
    summary["result"] = "failed" if failed else "passed"
    write_summary(out, summary)
    print(f"gpu_check: {summary['result']}; summary in {out}/gpu_check.txt", flush=True)
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
