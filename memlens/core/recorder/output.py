"""Where a run or a report is written: the one way every producer (run, watch, the app, the
lessons report and its arms) names and claims its folder (runfolder.claim); the producer's
exclusive creates make the claim."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memlens.core.runfolder.claim import RUN, Layout, claim_folder, job_folder_name, new_run_folder

RUNS_DIR = Path("runs")  # relative to the working folder, as a script's own outputs are


def choose_folder(out: str | Path | None, label: str, *, force: bool | None = False,
                  runs_dir: str | Path = RUNS_DIR, rank: int | None = None,
                  flag: str = "--out", layout: Layout = RUN,
                  said: Callable[[str], None] | None = None) -> Path:
    """The folder a new run (or what `layout` describes) writes: `out` when given (refused
    when it holds one, unless `force` and memlens wrote all of it: runfolder.claim; `force`
    None: no --force to offer, as in the app's dialogs), else a new
    `runs_dir/<time>-<label>` (a torchrun job's ranks: one folder of the job's, `rank<N>`
    in it). Nothing is written yet: the producer's creates claim it."""
    job = None
    if out is not None:
        folder = claim_folder(str(out), layout, force=force, flag=flag, said=said)
    else:
        job = job_folder_name(label) if rank is not None else None
        folder = (Path(runs_dir) / job) if job else new_run_folder(runs_dir, label)
    if rank is not None:
        folder = folder / f"rank{rank}"
        if out is not None or job:
            claim_folder(str(folder), layout, force=force, flag=flag, said=said)
    return folder
