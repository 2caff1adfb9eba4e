"""Where a run is written: the one way every producer (run, watch, lessons, the app) names
and claims its folder (runfolder.claim); its RunWriter's exclusive creates make the claim."""

from __future__ import annotations

from pathlib import Path

from memlens.core.runfolder.claim import claim_out_folder, job_folder_name, new_run_folder

RUNS_DIR = Path("runs")  # relative to the working folder, as a script's own outputs are


def choose_folder(out: str | Path | None, label: str, *, force: bool = False,
                  runs_dir: str | Path = RUNS_DIR, rank: int | None = None,
                  flag: str = "--out") -> Path:
    """The folder a new run writes: `out` when given (refused when it holds a run, unless
    `force`), else a new `runs_dir/<time>-<label>` (a torchrun job's ranks: one folder of
    the job's, `rank<N>` in it). Nothing is written yet: RunWriter's creates claim it."""
    if out is not None:
        folder = claim_out_folder(str(out), force=force, flag=flag)
    else:
        job = job_folder_name(label) if rank is not None else None
        folder = (Path(runs_dir) / job) if job else new_run_folder(runs_dir, label)
    if rank is not None:
        folder = folder / f"rank{rank}"
        if out is not None or job:
            claim_out_folder(str(folder), force=force, flag=flag)
    return folder
