"""Every lesson of the article moves the right figure by the right bytes, checked against
independent counts on plain torch (saved_tensors_hooks on a plain copy of the preset)."""

from __future__ import annotations

import pytest
import torch

import core.native
from core.config import TechniqueToggles
from core.presets import build_preset
from tests.core.helpers import run, samples_at, tiny_config

PRESETS = ("mlp", "cnn", "lstm", "gan", "transformer")


def _python_helpers(monkeypatch) -> None:
    monkeypatch.setattr(core.native, "load", lambda build=True: None)
    monkeypatch.setattr(core.native, "unavailable_reason", lambda: "no compiler (test)")


def saved_bytes_of(fn, params) -> int:
    """Bytes autograd saves for backward while `fn()` runs, each storage once, parameters'
    storages left out: a plain saved_tensors_hooks count that keeps every saved tensor alive
    until the end (so no two live storages share an address)."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    held: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr and ptr not in param_ptrs:
            held[ptr] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(held.values())


def plain_eval_saved_bytes(preset: str) -> int:
    """What one eval forward under grad saves, on a plain copy of the preset in eval mode."""
    p = build_preset(tiny_config(preset), torch.device("cpu"))
    p.set_train(False)
    return saved_bytes_of(lambda: p.forward_eval(TechniqueToggles()), p.parameters())


@pytest.mark.parametrize("mode", ["light", "python", "precise"])
@pytest.mark.parametrize("preset", PRESETS)
def test_eval_forward_holds_the_eval_graph_under_grad_and_nothing_under_no_grad(
        preset, mode, monkeypatch):
    if mode == "python":
        _python_helpers(monkeypatch)
    history, summary = run(preset, steps=2, eval_every=1, no_grad_eval=False,
                           precise=mode == "precise", at=("1:no_grad_eval=true",))
    assert summary.stopped_by == "completed"
    under_grad, under_no_grad = samples_at(history, "eval_forward", "activations")
    expected = plain_eval_saved_bytes(preset)
    assert expected > 0
    assert under_grad == expected
    assert under_no_grad == 0
    # `eval` still names the end of the eval phase, once the eval loss is gone.
    assert list(samples_at(history, "eval", "activations")) == [0, 0]
