"""What a watch writes about itself: run.json's header and summary, and the small helpers
the session shares with them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from memlens.core.recorder.output import choose_folder
from memlens.core.records import RunSummary
from memlens.core.runfolder.header import run_header
from memlens.core.watch import diagnoses as dx
from memlens.core.watch.control_channel import WatchStopped
from memlens.core.watch.limit import StepLimit

if TYPE_CHECKING:
    from memlens.core.watch.session import WatchSession

NOTHING_FOUND_HELP = (
    "memlens looks for nn.Module calls and torch.optim optimizers. If your script uses "
    "neither (a hand-written model of plain tensors), pass what it trains: "
    "`import memlens; with memlens.watch(models=[model], optimizers=[opt]): ...`, and mark "
    "steps with `Watch.step()`.")


def header(w: WatchSession) -> dict:
    """run.json's header for a watched run: the script, its argv, the environment."""
    probe = w.measure.probe
    label = (probe.label if probe else "") + (
        "" if w.measure.device.type == "cuda" else
        "; other = the models' inputs (batches, carried state)")
    env = w.rec.environment(parameters=sum(p.numel() for p in w.found.parameters()),
                            memory_label=label)
    doc = {**run_header("watch", script=w.script, argv=w.argv, rank=w.rank,
                        world_size=w.world_size),
           # where to run it again from (main.py fix, the app's Try the fix)
           "script_path": str(Path(w.script).resolve()) if w.script else None,
           "cwd": os.getcwd(),
           "capture_every": w.capture_every, "precise_requested": w.precise_requested,
           "environment": env, "models": list(w.seen.models_seen.values()),
           "detail": w.detail.describe()}  # which steps measure what is saved for backward
    sharding = probe.sharding if probe is not None else None
    if sharding is not None:  # FSDP's shards and padding, DDP's buckets (core.recorder.sharded)
        doc["sharding"] = sharding.facts()
    return doc


def summary(w: WatchSession, error: BaseException | None) -> RunSummary:
    if isinstance(error, StepLimit):  # the steps asked for, recorded: stopped, not failed
        error, limit = None, True
    else:
        limit = False
    failed = error is not None or (w.exit_code or 0) != 0
    tally = w.steps.tally
    return RunSummary(
        # (the rows made: a signal inside a step's end comes after its row, before the next)
        steps_done=tally.done,
        stopped_by="stopped" if isinstance(error, WatchStopped) or limit else "error" if failed
        else "completed",
        wall_s=w.steps.now(), final_loss=tally.final_loss, peak_bytes=tally.peak,
        mean_step_ms=tally.mean_step_ms,
        extra={"exit_code": w.exit_code,
               "error": error_text(error) if error is not None else None,
               "custom_phases_ms": {k: round(v, 3) for k, v in w.steps.custom_ms.items()},
               "detail": w.detail.describe(),
               "models": list(w.seen.models_seen.values()),
               "optimizers": list(w.seen.optimizers_seen.values())})


def optimizer_site() -> str:
    """The user's line that called optimizer.step() (where diagnosis 3 points)."""
    return dx.call_site(2)


def error_text(exc: BaseException) -> str:
    """`Type: message` for an exception, even one whose __str__ raises."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message could not be read)"
    return f"{type(exc).__name__}: {text}"


def launcher_rank() -> tuple[int, int]:
    """(rank, world size) as torchrun's environment gives them; (0, 1) outside it."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def run_folder(out, script: str | None, force: bool, rank: int | None, in_job: bool) -> Path:
    """The run's folder (recorder.output.choose_folder); `in_job`: `out` is a job's folder
    another rank owns (a rank a framework started again): only `rank<N>` in it is claimed."""
    if in_job:
        return choose_folder(Path(out) / f"rank{rank or 0}", "watch", force=force)
    stem = Path(script).stem if script else "watch"
    return choose_folder(out, f"watch-{stem}", force=force, rank=rank)
