"""Precise mode claims every allocation: its total at every sample is every storage alive,
those made before the run included (issue #47 point 6), checked against a count made here: a
plain TorchDispatchMode that sees every op's output from before the preset is built, and a
weak reference that sees each storage go."""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.loop import run_training
from tests.core.helpers import tiny_config


class LiveStorages(TorchDispatchMode):
    """The bytes of every storage an op made while the mode was on and that is alive now."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[weakref.ref, int]] = {}
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._add(t.untyped_storage())
        return out

    def _add(self, storage) -> None:
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in self.live:
            return
        n = storage.nbytes()

        def gone(ref, ptr=ptr, n=n) -> None:
            if self.live.get(ptr, (None,))[0] is ref:
                del self.live[ptr]
                self.bytes -= n

        self.live[ptr] = (weakref.ref(storage, gone), n)
        self.bytes += n


class _Totals(RunHistory):
    """A run's history that notes, at each sample, what the count above says."""

    def __init__(self, count: LiveStorages) -> None:
        super().__init__()
        self.count = count
        self.pairs: list[tuple[int, str, int, int]] = []

    def on_sample(self, s) -> None:
        super().on_sample(s)
        self.pairs.append((s.step, s.phase, s.total, self.count.bytes))


@pytest.mark.parametrize("preset", ["mlp", "cnn", "lstm", "transformer"])
def test_precise_totals_count_every_storage_alive_made_before_the_run_too(preset):
    cfg = tiny_config(preset, steps=3, precise=True, eval_every=1)
    count = LiveStorages()
    history = _Totals(count)
    with count:  # on before run_training builds the preset: its data, its templates
        run_training(cfg, RunControls(cfg.techniques), history)
    assert len(history.pairs) == 1 + 3 * 6
    wrong = [(step, phase, total - counted) for step, phase, total, counted in history.pairs
             if total != counted]
    assert not wrong
