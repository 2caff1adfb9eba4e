"""Diagnosis 7's scan (core.watch.module_cache): the modules and attributes it looks at are
named_modules()'s modules and their public tensor/container attributes, the same from the
native helpers (core/native/module_attrs.h) as from the Python definition; and the scans
after the first steps stay within their share of the run's time however large the model,
while a cache a large model keeps is still found."""

from __future__ import annotations

import collections

import torch
from torch import nn

from memlens.core.watch import module_cache
from memlens.core.watch.module_cache import (
    SCAN_EVERY,
    SCAN_FIRST,
    SCAN_SHARE,
    ModuleCaches,
    held_attributes,
)
from tests.core.native_marks import native, needs_native


def _models() -> list[nn.Module]:
    """Modules of many shapes: shared children, a None child, attributes of every kind."""
    shared = nn.Linear(3, 3)
    shared.cache = [torch.ones(2, requires_grad=True) * 2]
    shared.table = {"a": torch.ones(1)}
    shared.shape = (3, 3)
    shared._private = torch.ones(1)
    shared.plain = 4
    shared.ring = collections.deque([torch.ones(1)], maxlen=4)
    shared.by_name = collections.defaultdict(list)
    shared.__dict__[""] = []  # an empty name: not private
    shared.__dict__[7] = torch.ones(1)  # a key that is no name
    block = nn.Sequential(shared, nn.ReLU(), nn.Sequential(shared, nn.Tanh()))
    block.register_module("gap", None)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    return [block, nn.LSTM(4, 4), layer, nn.Sequential(block, nn.Linear(2, 2)), shared]


def _independent(roots: list[nn.Module]) -> tuple[list[int], list[tuple[int, str, int]]]:
    """What a scan should look at, from named_modules() and vars(): module ids in order
    (each once over all the roots), and (module's index, name, value's id)."""
    order: list[int] = []
    for root in roots:
        order += [id(m) for _, m in root.named_modules() if id(m) not in order]
    by_id = {id(m): m for root in roots for m in root.modules()}
    held = []
    for i, mid in enumerate(order):
        for name, value in vars(by_id[mid]).items():
            if (isinstance(name, str) and not name.startswith("_") and isinstance(
                    value, (torch.Tensor, list, tuple, dict, collections.deque))):
                held.append((i, name, id(value)))
    return order, held


def _flat(result) -> tuple[list[int], list[tuple[int, str, int]]]:
    modules, held = result
    return [id(m) for m in modules], [(i, name, id(v)) for i, name, v in held]


def test_the_python_walk_is_named_modules_and_vars():
    roots = _models()
    assert _flat(held_attributes(roots)) == _independent(roots)


@needs_native
def test_the_native_walk_is_the_python_one():
    roots = _models()
    assert _flat(native.held_attributes(roots, module_cache._HOLDERS)) == _independent(roots)
    assert _flat(native.held_attributes([], module_cache._HOLDERS)) == ([], [])


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _run(steps: int, scan_s: float, step_s: float) -> tuple[list[int], float, float]:
    """A run of `steps` steps of step_s seconds whose scans take scan_s: the steps scanned,
    the scans' seconds after the first SCAN_FIRST steps, the run's seconds."""
    clock = _Clock()
    caches = ModuleCaches(lambda *a: None, clock=clock)
    model = nn.Linear(2, 2)
    slow = module_cache.held_attributes

    def held(roots, holders):
        clock.t += scan_s
        return slow(roots, holders)

    caches._held = held
    scanned = []
    for step in range(steps):
        caches.new_step(step)
        if caches.pending:
            caches.scan({"model": model}, step)
            scanned.append(step)
        clock.t += step_s
    spent = sum(scan_s for s in scanned if s > SCAN_FIRST)
    return scanned, spent, clock.t


def test_a_cheap_scan_keeps_the_schedule():
    scanned, _, _ = _run(40, scan_s=1e-6, step_s=1e-2)
    expected = [s for s in range(1, 40)
                if s <= SCAN_FIRST or s % SCAN_EVERY in (0, 1)]
    assert scanned == expected


def test_a_dear_scan_keeps_to_its_share_and_still_comes():
    """A scan 3x a step (a large model at short steps): the scans after the first take at
    most SCAN_SHARE of the run, give or take the last pair, and pairs still come."""
    scan_s, step_s = 6e-3, 2e-3
    scanned, spent, total = _run(20_000, scan_s, step_s)
    later = [s for s in scanned if s > SCAN_FIRST]
    assert later and spent <= SCAN_SHARE * total + 2 * scan_s
    every = _run(20_000, 1e-9, step_s)[0]
    assert len(later) < len([s for s in every if s > SCAN_FIRST]) / 4
    # each looked-at step is followed by the one after (growth is seen between the two)
    starts = [s for s in later if s % SCAN_EVERY == 0]
    assert starts and all(s + 1 in later for s in starts[:-1])
