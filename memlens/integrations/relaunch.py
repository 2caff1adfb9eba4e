"""Ranks a framework starts again under `main.py watch`: Lightning's DDP on one machine runs
rank 1, 2... as `python SCRIPT ARGS` once more (its subprocess launcher), without memlens.

`main.py watch` says what it records in ENV and puts BOOT (a folder holding only a
`sitecustomize.py`) first on its children's PYTHONPATH; Python imports that at every child's
start. A child that runs the same script with a rank of its own (LOCAL_RANK set, another
process than the watch's) starts a watch of its own into its rank's folder of the job, from
the moment the script has imported torch (so an environment the script sets before that
import still counts), its framework callback joining it as `main.py watch`'s does. Any other
child (a tool the script runs, a DataLoader worker) is left alone; the boot then imports the
`sitecustomize` it hides, if there is one.

Rank 0 moves its own run into `rank0` of the job's folder when its framework says it is one
of several ranks (WatchSession.take_rank). At its end it waits for the other ranks' runs to
end (their files complete, for `main.py ranks` right after), and says in run.json and on the
command line which ranks were not recorded, and why.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ENV = "MEMLENS_WATCH_RELAUNCH"
BOOT = Path(__file__).resolve().parent / "boot"
WAIT_S = 60.0  # the longest rank 0 waits for another rank's run to end
_POLL_S = 0.1


@contextlib.contextmanager
def relaunched_ranks(w):
    """While `main.py watch` runs its script under watch `w`: children that are ranks of it
    record themselves (see the module doc); at the end, before `w` closes, the other ranks'
    runs are waited for and the missing ones said."""
    if w.world_size > 1:  # torchrun started every rank under main.py watch itself
        yield
        return
    old = {k: os.environ.get(k) for k in (ENV, "PYTHONPATH")}
    os.environ[ENV] = json.dumps({
        "script": str(Path(w.script).resolve()), "job": str(Path(w.folder).resolve()),
        "pid": os.getpid(), "precise": w.precise_requested,
        "capture_every": w.capture_every,
        "path": str(Path(__file__).resolve().parents[2])})  # where memlens imports from
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(BOOT)] + ([old["PYTHONPATH"]] if old["PYTHONPATH"] else []))
    ended = False  # the script ended by itself (else the others' runs are not waited for)
    try:
        yield
        ended = True
    except SystemExit as exc:
        ended = exc.code in (None, 0)
        raise
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        with contextlib.suppress(Exception):
            _other_ranks(w, wait=ended)


def _other_ranks(w, wait: bool) -> None:
    """Wait for the other ranks' runs to end; a note for each that was not recorded."""
    if w.world_size <= 1:
        return
    from memlens.core.runfolder.format import RUN_JSON
    from memlens.core.runfolder.header import LIVE, writer_state

    job = Path(w.folder).parent
    missing = []
    for rank in range(w.world_size):
        if rank == w.rank:
            continue
        doc_path = job / f"rank{rank}" / RUN_JSON
        if not doc_path.exists():
            missing.append(rank)
            continue
        deadline = time.monotonic() + (WAIT_S if wait else 0.0)
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if writer_state(json.loads(doc_path.read_text())) != LIVE:
                    break
            time.sleep(_POLL_S)
    if missing:
        w.log.note("info", "ranks not recorded",
                   f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
                   f"{w.world_size} {'were' if len(missing) > 1 else 'was'} not recorded: "
                   "the framework started them again without memlens, and memlens's start-up "
                   f"there ({ENV}, PYTHONPATH) did not run (a launcher that clears the "
                   "environment, or another Python). Run the job under torchrun: "
                   "`torchrun --nproc_per_node N main.py watch SCRIPT`")


# --- in a child (boot/sitecustomize.py) ------------------------------------------------------

def start_if_relaunched() -> None:
    """At a child's start: if it is a rank of the watched script, record it once torch is
    imported."""
    try:
        job = json.loads(os.environ[ENV])
    except (KeyError, ValueError):
        return
    if os.getpid() == job.get("pid") or "LOCAL_RANK" not in os.environ or not _runs(job):
        return
    if "torch" in sys.modules:
        _start(job)
    else:
        sys.meta_path.insert(0, _AfterTorch(job))


def _runs(job: dict) -> bool:
    """Whether this process runs the watched script (`python [options] SCRIPT ...`)."""
    args = list(getattr(sys, "orig_argv", []))[1:]
    while args and args[0].startswith("-"):
        if args[0] in ("-c", "-m"):
            return False
        args = args[2:] if args[0] in ("-W", "-X") else args[1:]
    return bool(args) and Path(args[0]).resolve() == Path(job["script"])


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Starts the watch when `import torch` has run (once)."""

    def __init__(self, job: dict) -> None:
        self.job = job

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, job = spec.loader.exec_module, self.job

        def exec_module(module) -> None:
            run(module)
            _start(job)

        spec.loader.exec_module = exec_module
        return spec


def _start(job: dict) -> None:
    try:
        from memlens.core.watch.session import WatchSession
        from memlens.integrations.attach import attach_framework_callback

        env = os.environ
        rank = int(env.get("RANK", env.get("LOCAL_RANK", "0")))
        world = int(env.get("WORLD_SIZE", "1"))
        w = WatchSession(out=job["job"], precise=bool(job.get("precise")),
                         capture_every=int(job.get("capture_every") or 0),
                         script=job["script"], rank=(rank, max(world, rank + 1)),
                         model_found=attach_framework_callback, in_job=True)
    except Exception as exc:  # the script runs on, unrecorded, as it would without memlens
        print(f"memlens watch: rank {os.environ.get('LOCAL_RANK')} is not recorded: {exc}",
              file=sys.stderr)
        return
    hook = sys.excepthook

    def uncaught(kind, exc, tb) -> None:
        with contextlib.suppress(Exception):
            w.close(error=exc, exit_code=1)
        hook(kind, exc, tb)

    sys.excepthook = uncaught
