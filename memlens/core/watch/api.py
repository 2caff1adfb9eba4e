"""`memlens.watch(...)`: record this process's own training, in a few words of code."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from torch import nn
from torch.optim import Optimizer

from memlens.core.watch.active import active_watch
from memlens.core.watch.found import as_list
from memlens.core.watch.session import Watch


def watch(models: nn.Module | Iterable[nn.Module] | None = None,
          optimizers: Optimizer | Iterable[Optimizer] | None = None, *,
          out: str | Path | None = None, precise: bool = False, capture_every: int = 0,
          force: bool = False, quiet: bool = False) -> Watch:
    """Record this process's training into a run folder, live.

    models, optimizers: what to record (default: every root module called, every
        optimizer made or stepped).
    out: the run folder (default: a new runs/<time>-watch-<script>); one that holds a run
        is refused unless `force` (which deletes that run's files first).
    precise: track every storage (exact in-step peak, allocations.npy); slower.
    capture_every: capture the autograd graph every N steps (run.json `graphs`); 0 = never.
    quiet: say nothing at close (by default the folder and the diagnoses go to stderr, as
        `main.py watch` says them).

    Use as `with memlens.watch(): train()`, or keep the Watch and call `.close()` at the
    end. Inside a script run by `main.py watch`, it returns that recording (the same type):
    its `phase()`, `step()`, `step_index` and `events` work, and its close() leaves the
    recording to its owner.
    """
    current = active_watch()
    if current is not None:
        return current.join()
    return Watch(as_list(models) or None, as_list(optimizers) or None, out=out,
                 precise=precise, capture_every=capture_every, force=force,
                 script=sys.argv[0] if sys.argv else None, announce=not quiet)
