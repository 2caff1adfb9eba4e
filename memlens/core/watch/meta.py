"""What a watch writes about itself: run.json's header and summary, and the small helpers
the session shares with them."""

from __future__ import annotations

import math
import os
import socket
from typing import TYPE_CHECKING

from memlens.core.records import RunSummary
from memlens.core.watch import diagnoses as dx

if TYPE_CHECKING:
    from memlens.core.watch.session import Watch

NOTHING_FOUND_HELP = (
    "memlens looks for nn.Module calls and torch.optim optimizers. If your script uses "
    "neither (a hand-written model of plain tensors), pass what it trains: "
    "`import memlens; with memlens.watch(models=[model], optimizers=[opt]): ...`, and mark "
    "steps with `Watch.step()`.")


def header(w: Watch) -> dict:
    """run.json's header for a watched run: the script, its argv, the environment."""
    probe = w.probe
    label = (probe.label if probe else "") + (
        "" if w.device.type == "cuda" else
        "; other = the models' inputs (batches, carried state)")
    env = w.rec.environment(parameters=sum(p.numel() for p in w.found.parameters()),
                            memory_label=label)
    doc = {"source": "watch", "script": w.script, "argv": w.argv,
           "pid": os.getpid(), "capture_every": w.capture_every,
           "precise_requested": w.precise_requested, "environment": env,
           "models": list(w.seen.models_seen.values()), "finished": False,
           "rank": w.rank, "world_size": w.world_size, **launcher_place()}
    sharding = probe.sharding if probe is not None else None
    if sharding is not None:  # FSDP's shards and padding, DDP's buckets (core.recorder.sharded)
        doc["sharding"] = sharding.facts()
    return doc


def summary(w: Watch, error: BaseException | None) -> RunSummary:
    failed = error is not None or (w.exit_code or 0) != 0
    return RunSummary(
        steps_done=w.step_index, stopped_by="error" if failed else "completed",
        wall_s=w._clock() - w._t0,
        final_loss=w._losses[-1] if w._losses else math.nan,
        peak_bytes=w._summary_peak,
        mean_step_ms=sum(w._step_ms) / len(w._step_ms) if w._step_ms else math.nan,
        extra={"exit_code": w.exit_code,
               "error": error_text(error) if error is not None else None,
               "custom_phases_ms": {k: round(v, 3) for k, v in w.phases.custom_ms.items()},
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


def launcher_place() -> dict:
    """Where this rank runs: the host, and under torchrun the node (torchrun's GROUP_RANK)
    and the rank on that node (LOCAL_RANK); None where the environment does not say."""
    def number(name: str) -> int | None:
        try:
            return int(os.environ[name])
        except (KeyError, ValueError):
            return None

    return {"host": socket.gethostname(), "node_rank": number("GROUP_RANK"),
            "local_rank": number("LOCAL_RANK")}
