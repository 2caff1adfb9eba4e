"""The native helpers. Precise mode on the allocator's events: the same live bytes as the
Python dispatch mode, frees seen between steps, frees it missed settled, and the fallback
where it cannot build. The graph node count: the same as the Python walk."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import memlens.core.native
from memlens.core.history import RunHistory
from memlens.core.native.tracker import (
    NativeStorageTracker,
    make_precise_tracker,
    make_saved_tracker,
)
from memlens.core.records import SAMPLE_PHASE_CODE
from tests.core.helpers import run, tiny_config
from tests.core.native_marks import native, needs_native


def _python_tracker(monkeypatch) -> None:
    monkeypatch.setattr(memlens.core.native, "load", lambda build=True: None)
    monkeypatch.setattr(memlens.core.native, "unavailable_reason", lambda: "no compiler (test)")


def _column(history: RunHistory, name: str) -> np.ndarray:
    return history.samples.column(name)


def _totals(history: RunHistory) -> np.ndarray:
    return _column(history, "total")


def _adam_step_counter_bytes(preset: str) -> int:
    from benchmarks.overhead import plain_step
    from memlens.core.preset_factory import build_preset

    cfg = tiny_config(preset)
    p = build_preset(cfg, torch.device("cpu"))
    plain_step(p, cfg.techniques, 0)
    return sum(s["step"].nbytes for o in p.optimizers for s in o.state.values())


@needs_native
@pytest.mark.parametrize("preset", ["mlp", "lstm"])
def test_native_live_bytes_equal_the_dispatch_modes_at_every_sample(preset, monkeypatch):
    fast, _ = run(preset, steps=4, precise=True)
    assert fast.meta["environment"]["precise_backend"].startswith("allocator")
    _python_tracker(monkeypatch)
    slow, _ = run(preset, steps=4, precise=True)
    assert slow.meta["environment"]["precise_backend"].startswith("dispatch")
    assert slow.meta["environment"]["precise_note"] == "no compiler (test)"
    # Same seeds, same tensors: at a phase boundary no kernel's scratch buffer is alive, so
    # both see the same storages, except what is made outside the dispatcher: Adam's step
    # counters (torch.tensor(0.0), one a parameter), which only the allocator sees.
    for column in ("params", "grads", "optimizer", "activations"):
        np.testing.assert_array_equal(_column(fast, column), _column(slow, column))
    diff = _totals(fast) - _totals(slow)
    counters = _adam_step_counter_bytes(preset)
    assert set(np.unique(diff).tolist()) <= {0.0, float(counters)} and diff[-1] == counters
    # The in-step peak also counts scratch buffers inside kernels: never below the
    # dispatch mode's, which sees op outputs only.
    peak = fast.steps.column("peak_bytes")
    assert (peak >= slow.steps.column("peak_bytes")).all()
    assert (peak >= fast.steps.column("allocated_bytes")).all()


def _tracker() -> NativeStorageTracker:
    tracker, why = make_precise_tracker(time.perf_counter(), torch.device("cpu"),
                                        with_frames=True)
    assert why is None
    return tracker


@needs_native
def test_alloc_and_free_rows_carry_phase_category_and_the_allocating_line():
    tracker = _tracker()
    tracker.begin_phase(3, "forward", "activations")
    with tracker:
        a = torch.empty(1000)  # the allocating line
        base = tracker.live_bytes
        del a
    tracker.close()
    rows = tracker.drain().tuples()
    alloc = [r for r in rows if r[1] == 0 and r[4] == 4000]
    free = [r for r in rows if r[1] == 1 and r[2] == alloc[0][2]]
    assert base >= 4000 and tracker.live_bytes == base - 4000
    assert alloc[0][5] == free[0][5] == 1 + 2  # "activations" (MEMORY_CATEGORIES order)
    assert (alloc[0][6], alloc[0][7]) == (3, SAMPLE_PHASE_CODE["forward"])
    assert "test_native.py" in alloc[0][8] and "test_alloc_and_free" in alloc[0][8]
    assert free[0][0] >= alloc[0][0]


@needs_native
def test_a_free_between_steps_and_a_storage_from_before_the_run_are_seen():
    before = torch.empty(500)  # exists before the run: registered, its free followed
    tracker = _tracker()
    tracker.track(before, "other", at_start=True)
    with tracker:
        held = torch.empty(250)
    assert tracker.live_bytes == 2000 + 1000
    del held  # between two steps: still listening until close()
    assert tracker.live_bytes == 2000
    del before
    assert tracker.live_bytes == 0
    tracker.close()
    actions = [(r[1], r[4]) for r in tracker.drain().tuples()]
    assert actions == [(0, 2000), (0, 1000), (1, 1000), (1, 2000)]


@needs_native
def test_classify_refines_live_storages_and_a_missed_free_is_settled_on_reuse():
    tracker = _tracker()
    with tracker:
        g = torch.empty(64)
    key = (g.get_device(), g.untyped_storage().data_ptr())
    tracker.classify({"grads": {key}})
    tracker.close()  # not listening: this free goes unseen...
    del g
    assert tracker.live_bytes == 256
    with tracker:  # ...until the allocator hands the address out again
        h = torch.empty(64)
        same = (h.get_device(), h.untyped_storage().data_ptr()) == key
    tracker.close()
    rows = tracker.drain().tuples()
    assert rows[0][5] == 1  # "grads" at drain time, refined after the alloc
    if same:
        assert [r[1] for r in rows] == [0, 1, 0] and tracker.live_bytes == 256
    del h


def test_without_a_compiler_precise_mode_uses_the_dispatch_mode(monkeypatch):
    _python_tracker(monkeypatch)
    history, summary = run("mlp", steps=2, precise=True)
    env = history.meta["environment"]
    assert env["precise_backend"].startswith("dispatch") and env["precise_note"]
    assert summary.steps_done == 2 and len(history.allocs) > 0


@needs_native
@pytest.mark.parametrize("preset", ["mlp", "cnn", "lstm", "gan", "transformer"])
def test_native_graph_node_count_equals_the_python_walk(preset):
    from memlens.core.preset_factory import build_preset
    from memlens.core.recorder.recorder import GRAPH_NODE_LIMIT, count_graph_nodes

    cfg = tiny_config(preset)
    p = build_preset(cfg, torch.device("cpu"))
    roots = [loss for loss, _ in p.forward_train(cfg.techniques).backward]
    expected = count_graph_nodes(roots)
    assert expected > 5
    assert native.count_graph_nodes(roots, GRAPH_NODE_LIMIT) == expected
    assert native.count_graph_nodes(roots, 5) == 5  # the limit holds
    assert native.count_graph_nodes([torch.zeros(3)], GRAPH_NODE_LIMIT) == 0
    with pytest.raises(TypeError):
        native.count_graph_nodes([object()], GRAPH_NODE_LIMIT)
    with pytest.raises(TypeError):  # a plain C function: it checks its own arguments
        native.count_graph_nodes(roots)


@needs_native
def test_grad_watch_norm_follows_the_gradients_and_leaves_user_hooks_alone():
    lin = torch.nn.Linear(64, 32)
    other = torch.nn.Linear(32, 2)
    seen = []
    other.weight.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.norm()))
    params = [*lin.parameters(), *other.parameters()]
    watch = native.GradWatch(params)
    # What the loop calls every step: plain C functions that keep the watch alive.
    install, sum_of_squares = watch.fast_functions()
    uninstall = watch.uninstall
    del watch
    install()
    x = torch.randn(8, 64)
    other(lin(x)).square().sum().backward()
    assert len(seen) == 1  # the user's own hook still runs
    expected = sum(float(p.grad.double().square().sum()) for p in params)
    assert sum_of_squares() == pytest.approx(expected, rel=1e-6)
    with torch.no_grad():
        lin.weight.grad.mul_(3)  # changed after its hook ran: read again, not cached
    expected = sum(float(p.grad.double().square().sum()) for p in params)
    assert sum_of_squares() == pytest.approx(expected, rel=1e-6)
    lin.weight.grad = None
    assert sum_of_squares() < expected
    lin.bias.grad = torch.randn(64)[::2]  # strided: the native path leaves it to Python
    assert sum_of_squares() == -1.0
    uninstall()
    assert lin.weight._post_accumulate_grad_hooks is None
    assert other.weight._post_accumulate_grad_hooks is not None


@needs_native
def test_light_probe_rescans_optimizer_state_when_a_state_tensor_is_replaced():
    """The sample keeps its optimizer scan while the state holds the same tensor objects;
    one replaced (as loading a state dict does) is counted anew."""
    lin = torch.nn.Linear(16, 8)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.randn(4, 16)).sum().backward()
    opt.step()
    watch = native.GradWatch(list(lin.parameters()))
    sample = native.LightProbe(watch, make_saved_tracker().native).fast_sample()
    states = [opt.state]
    first = sample(True, states, [], False)
    assert first[1] == sum(t.untyped_storage().nbytes() for s in opt.state.values()
                           for t in s.values())
    assert sample(False, states, [], False)[1] == first[1]  # unchanged: the same figure
    st = opt.state[lin.weight]
    st["exp_avg"] = torch.zeros(2 * st["exp_avg"].numel())
    assert sample(False, states, [], False)[1] == first[1] + lin.weight.numel() * 4
    with pytest.raises(TypeError):
        sample(False, states, (), False)  # carried must be a list


@needs_native
def test_light_probe_edges_keep_their_samples_until_taken_and_check_their_arguments():
    """The loop's phase edges: each keeps a row (phase code, time, figures) that take()
    hands over once, in order; the optimizer edge reads the preset's optimizers itself."""
    native = memlens.core.native.load(build=False)
    lin = torch.nn.Linear(16, 8)
    opt = torch.optim.Adam(lin.parameters())

    class Preset:
        optimizers = [opt]

    watch = native.GradWatch(list(lin.parameters()))
    light = native.LightProbe(watch, make_saved_tracker().native)
    zero_grad, forward, backward, optimizer = (
        SAMPLE_PHASE_CODE[p] for p in ("zero_grad", "forward", "backward", "optimizer"))
    light.set_rules([zero_grad, backward], [optimizer], [forward], Preset(), light.clock())
    edge, take = light.fast_edges()
    lin(torch.randn(4, 16)).sum().backward()
    edge(backward, [])  # the gradients are there
    opt.step()
    edge(optimizer, [])  # the Adam moments and step counters are there
    rows = take()
    assert [r[0] for r in rows] == [backward, optimizer]
    assert 0 <= rows[0][1] <= rows[1][1]
    grads = sum(p.numel() * 4 for p in lin.parameters())
    assert rows[0][2] == grads and rows[0][3] == 0
    assert rows[1][3] == sum(t.untyped_storage().nbytes() for s in opt.state.values()
                             for t in s.values())
    assert rows[0][6] == -1 and rows[1][6] == -1  # the heap is read at forward only
    assert rows[0][7] == -1 and rows[1][7] == -1  # and the resident memory with it
    assert take() == []
    with pytest.raises(TypeError):
        edge(backward, ())  # carried must be a list
    with pytest.raises(ValueError):
        edge(99, [])


@needs_native
@pytest.mark.parametrize(("preset", "toggles"), [
    ("mlp", {"zero_grad": "off"}),
    ("lstm", {"zero_grad": "off", "detach_state": False, "no_grad_eval": False}),
    ("gan", {"zero_grad": "zeros", "leak_loss_sum": True, "no_grad_eval": False}),
    ("cnn", {"leak_cache": True, "optimizer": "sgd"}),
    ("transformer", {"accumulate": 2, "optimizer": "adamw", "leak_loss_sum": True}),
])
def test_light_mode_figures_are_the_same_with_and_without_the_native_helpers(preset, toggles,
                                                                           monkeypatch):
    """Saved-tensor hooks, graph count, the sample's gradient, optimizer and carried-tensor
    scan (LightProbe), the norm: native or Python, one set of figures. zero_grad off makes
    the gradients accumulate, so a stale cache would show; the leaks put loss graphs and
    intermediates among the carried tensors."""
    fast, _ = run(preset, steps=5, eval_every=2, **toggles)
    _python_tracker(monkeypatch)
    slow, _ = run(preset, steps=5, eval_every=2, **toggles)
    for column in ("step", "phase", "params", "grads", "optimizer", "activations", "other",
                   "total"):
        np.testing.assert_array_equal(_column(fast, column), _column(slow, column))
    # The native edges keep a sample's time until the step's end: still its own time, after
    # the one before it and before the step's record.
    times, steps = _column(fast, "time_s"), _column(fast, "step").astype(int)
    assert np.all(np.diff(times) > 0)
    end_of = dict(zip(fast.steps.column("step").astype(int), fast.steps.column("time_s"),
                      strict=True))
    assert all(t <= end_of[s] for s, t in zip(steps[1:], times[1:], strict=True) if s in end_of)
    for column in ("graph_nodes", "saved_bytes", "retained_bytes"):
        np.testing.assert_array_equal(fast.steps.column(column), slow.steps.column(column))
    np.testing.assert_allclose(fast.steps.column("grad_norm"), slow.steps.column("grad_norm"),
                               rtol=1e-5)


def test_a_precise_run_that_must_build_the_recorder_says_so_first(monkeypatch):
    monkeypatch.setattr(memlens.core.native, "needs_build", lambda: True)
    history, summary = run("mlp", steps=2, precise=True)
    first = history.events()[0]
    assert first.kind == "setup" and first.key == "native build" and "once" in first.message
    assert not first.on_timeline
    assert summary.steps_done == 2
    monkeypatch.setattr(memlens.core.native, "needs_build", lambda: False)
    history, _ = run("mlp", steps=2, precise=True)
    assert all(e.key != "native build" for e in history.events())
    monkeypatch.setattr(memlens.core.native, "needs_build", lambda: True)
    history, _ = run("mlp", steps=2)  # light mode never builds: nothing to say
    assert all(e.key != "native build" for e in history.events())


@needs_native
def test_saved_tensor_holders_let_go_of_every_tensor_after_backward_or_a_dropped_graph():
    """The pack hook keeps the detached tensors autograd hands it, and an alias of the rest:
    after backward, or a graph dropped without one, nothing of a step stays behind. Counted
    by weak references to every tensor each step's forward made (not by a count of every
    tensor in the process, which earlier tests move)."""
    import gc
    import weakref

    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    from memlens.core.native.tracker import make_saved_tracker
    from memlens.core.preset_factory import build_preset

    cfg = tiny_config("gan")
    p = build_preset(cfg, torch.device("cpu"))
    tracker = make_saved_tracker()
    made: list[list[weakref.ref]] = []

    class Made(TorchDispatchMode):  # a weak reference to each tensor an op returns
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            made[-1].extend(weakref.ref(t) for t in pytree.tree_leaves(out)
                            if isinstance(t, torch.Tensor))
            return out

    def step():
        made.append([])
        with tracker.hooks():
            with Made():
                result = p.forward_train(cfg.techniques)
            for loss, inputs in result.backward:
                loss.backward(inputs=inputs)

    for _ in range(20):
        step()
    gc.collect()
    assert sum(map(len, made)) > 20 * 10  # the forwards made tensors, and they were seen
    alive = [r for refs in made[:-1] for r in refs if r() is not None]
    assert alive == []  # nothing of an earlier step is held
    assert tracker.live_bytes == 0
    with tracker.hooks():
        result = p.forward_train(cfg.techniques)
    assert tracker.live_bytes > 0
    del result
    gc.collect()
    assert tracker.live_bytes == 0
