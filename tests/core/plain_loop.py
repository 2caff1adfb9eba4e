"""A preset's training loop written out in plain torch, measured by torch's own profiler: the
CPU allocator's every allocation and free, in order (profile_memory=True), from before the
preset is built, so the live total it replays is the whole process's tensor memory.

Independent of memlens's recorders: no saved-tensor hooks, no native recorder, no samples.
The loop holds what a plain loop holds (the last forward's loss and outputs until the next
forward rebinds them), and marks its windows with record_function.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile, record_function

from memlens.core.config import RunConfig, TechniqueToggles
from memlens.core.preset_factory import build_preset

STEP, EVAL = "plain:step", "plain:eval"


@dataclass
class AllocatorTrace:
    """The allocator's events in time order: `t` (ns), `live` (bytes live after each), and
    the marked windows: name -> [(start ns, end ns), ...]."""

    t: np.ndarray
    live: np.ndarray
    windows: dict[str, list[tuple[int, int]]]

    def peak(self, start: int, end: int) -> int:
        """The largest live total inside [start, end]: as the window began, and after each
        of its events."""
        before = self.live[self.t < start]
        inside = self.live[(self.t >= start) & (self.t <= end)]
        candidates = [before[-1] if before.size else 0, *inside]
        return int(max(candidates))

    def peaks(self, name: str) -> list[int]:
        return [self.peak(s, e) for s, e in self.windows.get(name, [])]

    def live_at(self, time_ns: int) -> int:
        before = self.live[self.t <= time_ns]
        return int(before[-1]) if before.size else 0


def allocator_trace(fn) -> AllocatorTrace:
    """Run `fn()` under the profiler and replay the allocator's events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events: list[tuple[int, int]] = []
    windows: dict[str, list[tuple[int, int]]] = {}
    todo = list(prof.profiler.kineto_results.experimental_event_tree())
    while todo:
        node = todo.pop()
        if node.tag == _EventType.Allocation:
            extra = node.extra_fields
            events.append((node.start_time_ns, extra.alloc_size, extra.ptr))
        elif node.name.startswith("plain:"):
            windows.setdefault(node.name, []).append((node.start_time_ns, node.end_time_ns))
        todo.extend(node.children)
    events.sort(key=lambda e: e[0])
    for spans in windows.values():
        spans.sort()
    # A free of a block allocated before the profile (a cache torch filled earlier in the
    # process) is left out: the replay counts what `fn` allocated.
    mine: set[int] = set()
    kept = []
    for t, size, ptr in events:
        if size > 0:
            mine.add(ptr)
        elif ptr not in mine:
            continue
        else:
            mine.discard(ptr)
        kept.append((t, size))
    t = np.array([e[0] for e in kept], dtype=np.int64)
    live = np.cumsum([e[1] for e in kept]).astype(np.int64)
    return AllocatorTrace(t, live, windows)


def plain_loop(preset: str, steps: int, *, sets: dict | None = None, amp: bool = False,
               zero_grad: str = "set_to_none", eval_grad: bool | None = None
               ) -> AllocatorTrace:
    """`steps` training steps of `preset` (Adam, memlens's default), each in a STEP window;
    with `eval_grad` not None an eval forward after each step in an EVAL window: under grad
    in train mode (True) or under no_grad in eval mode (False)."""

    def body() -> None:
        p = build_preset(RunConfig().with_values({"preset": preset, **(sets or {})}),
                         torch.device("cpu"))
        bound = {}  # what the loop keeps bound: the last forward's result (loss, outputs)
        plain = TechniqueToggles()
        for step in range(steps):
            p.step_index = step
            with record_function(STEP):
                for opt in p.optimizers:
                    opt.zero_grad(set_to_none=zero_grad == "set_to_none")
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                    result = p.forward_train(plain)
                bound["result"] = result  # the last step's goes only now
                result.value()
                for loss, inputs in result.backward:
                    loss.backward(inputs=inputs)
                del result, loss
                for opt in p.optimizers:
                    opt.step()
            if eval_grad is not None:
                with record_function(EVAL):
                    p.set_train(eval_grad)
                    grad = contextlib.nullcontext() if eval_grad else torch.no_grad()
                    with grad:
                        eval_loss = p.forward_eval(plain)
                        eval_loss.item()
                    del eval_loss
                    p.set_train(True)

    return allocator_trace(body)
