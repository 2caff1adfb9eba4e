"""Run in a process of its own by benchmarks/watch.py: how much of memlens's Python a
training step runs on the training thread, counted (sys.settrace's opcode events in
memlens's own files: bytecode instructions), not timed.

Right after a step's kernels none of memlens's code or data is in cache, and its Python runs
cold: on the AMD EPYC VM a watch of the 4 ms MLP step ran about 3,850 instructions a step
for +430 us (about 0.11 us an instruction, several times their warm cost). A count is the
same on every machine and under any load, where the step times of a shared machine move by
more than a cut is worth: it shows where the per-step Python stands on the way to the 2 ms
target, beside the timed ratios. It does not see work done in C (a hash, a pybind11 call),
which only timing in place does, and it weighs every instruction alike where work done in
batches runs warm (the history's rows: 879 fewer instructions a step of the lab, no time
effect the timing resolved).

    python -m benchmarks._instructions_probe --out FILE

Writes {case: {"instructions": per step, "calls": memlens functions called per step, "top":
[[qualified name, instructions per step], ...]}} for the watch on benchmarks/_mlp_step.py,
steps without the detail (`detail` far away) and auto's steady state, and the lab's light
mode on the mlp and gan presets. The writer thread's are not counted (another thread).
"""

from __future__ import annotations

import argparse
import collections
import json
import runpy
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = str(ROOT / "memlens") + "/"
STEPS = 60
NEVER = 10**9  # detail=N with N past the run: every step after the first few without it


class InstructionCount:
    """memlens's bytecode instructions and function calls on this thread while `count`
    runs."""

    def __init__(self) -> None:
        self.ops: collections.Counter[str] = collections.Counter()
        self.calls = 0

    def _trace(self, frame, event, _arg):
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE):
            return None
        self.calls += 1
        name = code.co_qualname
        ops = self.ops
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False

        def local(_frame, event, _arg):
            if event == "opcode":
                ops[name] += 1
            return local

        return local

    def count(self, step, n: int) -> dict:
        sys.settrace(self._trace)
        try:
            for i in range(n):
                step(i)
        finally:
            sys.settrace(None)
        total = sum(self.ops.values())
        return {"instructions": total / n, "calls": self.calls / n,
                "top": [[k, v / n] for k, v in self.ops.most_common(12)]}


def watch_cases() -> dict:
    import torch

    torch.set_num_threads(1)
    names = runpy.run_path(str(ROOT / "benchmarks" / "_mlp_step.py"), run_name="memlens_probe")
    train_step = names["train_step"]
    import memlens

    out = {}
    with tempfile.TemporaryDirectory(prefix="memlens-instructions-") as tmp:
        for case, detail in (("watch_mlp_no_detail", NEVER), ("watch_mlp_auto", None)):
            w = memlens.watch(out=Path(tmp) / case, quiet=True, detail=detail)
            try:
                i = 0
                while i < 40 or (w.detail["chosen"] == "measuring" and i < 400):
                    train_step(i)
                    i += 1
                out[case] = InstructionCount().count(train_step, STEPS)
                out[case]["chosen"] = w.detail["chosen"]
            finally:
                w.close()
    return out


def lab_cases() -> dict:
    import torch

    from benchmarks.overhead import Memlens
    from memlens.core.config import RunConfig
    from memlens.core.preset_factory import build_preset

    out = {}
    for preset_name in ("mlp", "gan"):
        config = RunConfig(preset=preset_name, device="cpu", eval_every=0, steps=10**9)
        variant = Memlens("light", config, build_preset(config, torch.device("cpu")))
        variant.block(20)  # warm: the probe made, short steps found
        variant.session.install_stop_hooks()
        try:
            out[f"lab_{preset_name}_light"] = InstructionCount().count(
                lambda i, v=variant: v._one(1000 + i), STEPS)
        finally:
            variant.close()
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._instructions_probe")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = watch_cases() | lab_cases()
    Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
