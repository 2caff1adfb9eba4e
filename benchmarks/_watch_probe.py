"""Run in a process of its own by benchmarks/watch.py: an example script's `train_step`, in
blocks of steps alternately plain and under `memlens.watch()` (the one-line API), in one
process. Both sides share the process's memory layout and run seconds apart, which
separate processes do not: on a shared machine a process's steps can be 20% slower than the
next one's for reasons of its own (its heap's page-fault regime, the core it landed on).

    python -m benchmarks._watch_probe SCRIPT BLOCKS STEPS_PER_BLOCK [--out FILE]
        [-- SCRIPT_ARGS...]

Prints one JSON object: {"plain": [[wall ms, ...] per block], "watched": [...],
"toggles": [...], and each with "_cpu"}: STEPS_PER_BLOCK steps of each block, after its
first ones (see SKIP) are left out. "toggles" is a watch given a
technique change that never comes due (`at=[IDLE_AT]`): its interventions are made and
consulted at every hook, and nothing is overridden, the cost of toggles being possible;
"watched" has none (the attribute the hooks check is None). With --out, writes it to FILE
followed by the rank's number instead (under torchrun: one process per rank, each its own
file; the ranks' collectives keep their blocks in step).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import time
from pathlib import Path

from memlens.core.watch.detail import (
    CYCLE,
    FIRST_DETAILED,
    MAX_CALIBRATION_CYCLES,
    WARM_UP_CYCLES,
)

# Steps dropped at the start of each block: a watch finds the models and makes its probe on
# its first steps; and a watched block goes on dropping steps until detail=auto
# (core.watch.detail) has measured its cost and chosen (Watch.detail): a run's steady state
# is what a user meets over its minutes, calibration its first few dozen steps.
SKIP = 12
# steps at most; a step the detail came to early (a change) cuts its cycle short: dcgan's
# sampling every 10 steps took 93 where the pairs of an earlier calibration alone took 75
CALIBRATING = FIRST_DETAILED + CYCLE * (WARM_UP_CYCLES + MAX_CALIBRATION_CYCLES) + 40
WARM_UP = 5
IDLE_AT = "1000000000:zero_grad=script"
SIDES = ("plain", "watched", "toggles")


def main(argv: list[str]) -> None:
    script, blocks, per_block = argv[0], int(argv[1]), int(argv[2])
    out_file = None
    if argv[3:4] == ["--out"]:
        out_file, argv = argv[4], argv[:3] + argv[5:]
    script_args = argv[4:] if argv[3:4] == ["--"] else argv[3:]
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    names = runpy.run_path(script, run_name="memlens_benchmark")  # the setup, not the loop
    train_step = names["train_step"]

    import memlens

    # ranks in step (their collectives): each skips as many steps, the most calibration takes
    sharded = int(os.environ.get("WORLD_SIZE", "1")) > 1
    step = 0
    for _ in range(WARM_UP):
        train_step(step)
        step += 1
    out: dict[str, list[list[float]]] = {k: [] for side in SIDES
                                         for k in (side, f"{side}_cpu")}
    with tempfile.TemporaryDirectory(prefix="memlens-watch-probe-") as tmp:
        for b in range(blocks):
            for side in SIDES[b % 3:] + SIDES[:b % 3]:  # each side first in turn
                w = (None if side == "plain" else
                     memlens.watch(out=Path(tmp) / f"{side}{b}", quiet=True,
                                   at=[IDLE_AT] if side == "toggles" else []))
                skip = 0
                while skip < SKIP or (w is not None and skip < CALIBRATING and (
                        sharded or w.detail["chosen"] == "measuring")):
                    train_step(step)
                    step += 1
                    skip += 1
                wall, cpu = [], []
                for _ in range(per_block):
                    t0, c0 = time.perf_counter(), time.thread_time()
                    train_step(step)
                    wall.append((time.perf_counter() - t0) * 1e3)
                    cpu.append((time.thread_time() - c0) * 1e3)
                    step += 1
                if w is not None:
                    w.close()
                out[side].append(wall)
                out[f"{side}_cpu"].append(cpu)
    if out_file is None:
        print(json.dumps(out))
    else:
        Path(f"{out_file}{os.environ.get('RANK', '0')}").write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
