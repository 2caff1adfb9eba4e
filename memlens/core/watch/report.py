"""What a watch says when it ends: where it recorded, and its diagnoses (the CLI's
`main.py watch` and `memlens.watch()` in code say the same)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from memlens.core.watch.session import WatchSession


def print_summary(w: WatchSession, file: TextIO | None = None) -> None:
    out = file or sys.stderr
    steps = "1 step" if w.step_index == 1 else f"{w.step_index} steps"
    rank = f" (rank {w.rank} of {w.world_size})" if w.world_size > 1 else ""
    print(f"memlens watch: {steps} recorded in {w.folder}{rank}", file=out)
    for e in w.events:
        if e.kind == "diagnosis":
            print(f"  diagnosis: {e.message}\n    at {e.where}\n    fix: {e.fix}", file=out)
        elif e.key == "ranks not recorded":
            print(f"  {e.message}", file=out)
    if w.world_size > 1 and w.rank == 0:
        print(f"  every rank side by side: python main.py ranks {w.folder.parent}", file=out)
