"""The engine's memory figures hold what the issue says they must, measured on tiny runs."""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import pytest
import torch

import memlens.core.native
from memlens.core.config import RunConfig
from memlens.core.history import RunHistory
from memlens.core.native.tracker import NativeSavedTracker
from memlens.core.preset_factory import build_preset
from memlens.core.recorder.saved import SavedTensorTracker
from memlens.core.records import SAMPLE_PHASES
from tests.core.helpers import run, samples_at, steps_col, tiny_config


def test_mlp_adam_params_and_optimizer_bytes_are_exact():
    history, _ = run("mlp", steps=3, optimizer="adam")
    preset = build_preset(tiny_config("mlp"), torch.device("cpu"))
    params = list(preset.parameters())
    n = sum(p.numel() for p in params)
    assert samples_at(history, "start", "params")[0] == 4 * n
    assert np.all(samples_at(history, "optimizer", "params") == 4 * n)
    # Adam keeps exp_avg and exp_avg_sq (4 bytes an element each) and a float32 step counter
    # (its own 4-byte storage) per parameter tensor.
    opt_after_first = samples_at(history, "optimizer", "optimizer")[0]
    assert opt_after_first == 2 * 4 * n + 4 * len(params)
    assert samples_at(history, "zero_grad", "optimizer")[0] == 0


def test_set_to_none_frees_grads_and_zeros_keeps_them():
    h_none, _ = run("mlp", steps=4, zero_grad="set_to_none")
    h_zero, _ = run("mlp", steps=4, zero_grad="zeros")
    params = samples_at(h_none, "start", "params")[0]
    # Step 0 has no grads yet either way; from step 1 the modes differ.
    assert np.all(samples_at(h_none, "zero_grad", "grads")[1:] == 0)
    assert np.all(samples_at(h_zero, "zero_grad", "grads")[1:] == params)
    # After backward both hold one gradient per parameter.
    assert np.all(samples_at(h_none, "backward", "grads") == params)


def test_zero_grad_off_grows_grad_norm_until_switched_back():
    history, _ = run("mlp", steps=16, at=("0:zero_grad=off", "8:zero_grad=set_to_none"),
                     optimizer="sgd", lr=0.0)  # lr 0: the same gradient every cycle
    norms = steps_col(history, "grad_norm")
    off, back = norms[:8], norms[8:]
    assert np.all(np.diff(off) > 0), off  # gradients pile up step over step
    assert back.max() < off[-1] / 2
    assert np.ptp(back) < 0.5 * back.mean()  # cleared each step: no growth
    toggles = [e for e in history.events() if e.kind == "toggle"]
    assert [(e.step, e.key, e.new) for e in toggles] == [
        (0, "zero_grad", "off"), (8, "zero_grad", "set_to_none")]


def test_accumulation_steps_the_optimizer_every_k_micro_batches():
    history, _ = run("mlp", steps=6, accumulate=3, zero_grad="zeros")
    opt_ms = steps_col(history, "optimizer_ms")
    # The optimizer only runs on micro-batches 2 and 5; others cost (almost) nothing.
    assert opt_ms[2] > opt_ms[0] and opt_ms[5] > opt_ms[3]
    opt_bytes = samples_at(history, "optimizer", "optimizer")
    assert opt_bytes[0] == opt_bytes[1] == 0 and opt_bytes[2] > 0


def test_loss_sum_leak_grows_by_one_eval_graph_only_under_grad():
    common = dict(steps=12, eval_every=1, leak_loss_sum=True)
    leaky, _ = run("mlp", no_grad_eval=False, **common)
    fixed, _ = run("mlp", no_grad_eval=True, **common)
    end_leaky = samples_at(leaky, "eval", "total")
    growth = np.diff(end_leaky)
    # Each eval forward under grad leaves its saved activations alive through total_loss.
    per_forward = steps_col(leaky, "saved_bytes")[1:]
    assert np.all(growth > 0)
    np.testing.assert_allclose(growth, per_forward, rtol=0.1)
    assert np.all(np.diff(samples_at(fixed, "eval", "total")) == 0)
    assert any(e.kind == "leak" and "total_loss += loss" in e.explanation
               for e in leaky.events())


def test_lstm_without_detach_is_an_explained_error_and_files_keep_data():
    history, summary = run("lstm", steps=5, detach_state=False)
    assert summary.stopped_by == "error"
    err = summary.error
    assert err.step == 1 and err.phase == "backward"
    assert "second time" in err.message
    assert "detach" in err.explanation and "hidden" in err.explanation
    assert len(history.steps) == 1  # step 0 was recorded and kept
    # and so was what step 1 measured before its backward failed
    phases = [(int(a), SAMPLE_PHASES[int(b)]) for a, b in
              zip(history.samples.column("step"), history.samples.column("phase"), strict=True)]
    assert phases[-2:] == [(1, "zero_grad"), (1, "forward")]


def test_lstm_detach_back_on_via_schedule_restores_clean_flat_steps():
    from memlens.core.history import RunHistory
    from memlens.core.loop import run_training

    cfg = tiny_config("lstm", 12, ("6:detach_state=true",), detach_state=False)
    history = RunHistory()
    summary = run_training(cfg, sink=history, on_error="continue")
    errors = [e.step for e in history.events() if e.kind == "error"]
    assert errors == [1, 2, 3, 4, 5]
    assert list(steps_col(history, "step")) == [0, 6, 7, 8, 9, 10, 11]
    assert summary.stopped_by == "completed"
    assert np.ptp(samples_at(history, "optimizer", "total")[1:]) == 0


def test_lstm_retain_graph_without_detach_hits_the_real_in_place_error():
    # With retain_graph the old graph survives, but it saved the weights that
    # optimizer.step() has since updated in place: PyTorch refuses, and so must we (a pack
    # hook that forgot the version check would let memory grow silently instead).
    _, summary = run("lstm", steps=4, detach_state=False, retain_graph=True)
    assert summary.stopped_by == "error" and summary.error.step == 1
    assert "modified by an inplace operation" in summary.error.message
    assert "retain_graph does not fix a missing detach" in summary.error.explanation


@pytest.fixture(params=["python", "native"])
def make_tracker(request):
    """The saved-tensor trackers, the Python one and the native one: the same behaviour."""
    if request.param == "python":
        return SavedTensorTracker
    module = memlens.core.native.load()
    if module is None:
        pytest.skip(f"native helpers unavailable: {memlens.core.native.unavailable_reason()}")
    return lambda: NativeSavedTracker(module)


def test_no_grad_eval_lowers_eval_activations_on_cnn(make_tracker):
    def eval_saved(no_grad: bool) -> float:
        cfg = tiny_config("cnn")
        preset = build_preset(cfg, torch.device("cpu"))
        tracker = make_tracker()
        ctx = torch.no_grad() if no_grad else torch.enable_grad()
        with tracker.hooks(), ctx:
            loss = preset.forward_eval(cfg.techniques)
            return tracker.live_bytes + 0 * loss.item()

    assert eval_saved(no_grad=True) == 0
    assert eval_saved(no_grad=False) > 0
    # And in the loop, the eval phase under grad holds its graph while the leak keeps it.
    leaky, _ = run("cnn", steps=3, eval_every=1, leak_loss_sum=True, no_grad_eval=False)
    fixed, _ = run("cnn", steps=3, eval_every=1, leak_loss_sum=True, no_grad_eval=True)
    assert samples_at(leaky, "eval", "activations")[-1] > samples_at(fixed, "eval",
                                                                      "activations")[-1]


def test_bf16_autocast_lowers_saved_bytes_on_cnn():
    fp32, _ = run("cnn", steps=2, amp="off", width=16)
    bf16, _ = run("cnn", steps=2, amp="bf16", width=16)
    assert steps_col(bf16, "saved_bytes")[-1] < 0.85 * steps_col(fp32, "saved_bytes")[-1]


class _TwoOut(torch.autograd.Function):
    """Two outputs, the second saved for backward: autograd names it by its own number."""

    @staticmethod
    def forward(ctx, x):
        a, b = x * 3, x.exp()
        ctx.save_for_backward(b)
        return a, b

    @staticmethod
    def backward(ctx, ga, gb):
        (b,) = ctx.saved_tensors
        return ga * 3 + gb * b


def _in_place_input():  # an op's input, changed in place with autograd on: history rebased
    a = torch.randn(5, requires_grad=True)
    b = a * 2
    c = b.sin()
    b.add_(1)
    return c.sum()


def _in_place_output():  # an op's own output, saved and changed in place
    y = torch.randn(3, 4, requires_grad=True).sigmoid()
    y.mul_(2)
    return y.sum()


def _in_place_leaf():  # a weight, as optimizer.step() changes it before a second backward
    w = torch.randn(3, requires_grad=True)
    y = (w * w).sum()
    with torch.no_grad():
        w.add_(1)
    return y


def _in_place_second_output():
    a, b = _TwoOut.apply(torch.randn(4, requires_grad=True))
    with torch.no_grad():
        b.add_(1)
    return (a + b).sum()


def _in_place_view_of_data():  # a batch sliced from a data set that is then changed
    data = torch.randn(64, 3)
    w = torch.randn(3, 2, requires_grad=True)
    y = (data[8:16] @ w).sum()
    data.mul_(2)
    return y


def _error_text(make, hooks=None) -> str:
    with hooks if hooks is not None else contextlib.nullcontext():
        loss = make()
    with pytest.raises(RuntimeError) as caught:
        loss.backward()
    return str(caught.value)


@pytest.mark.parametrize("anomaly", [False, True])
@pytest.mark.parametrize("make", [_in_place_input, _in_place_output, _in_place_leaf,
                                  _in_place_second_output, _in_place_view_of_data])
def test_saved_tensor_hook_raises_autograds_own_in_place_error_word_for_word(
        make_tracker, make, anomaly):
    """A pack hook turns autograd's version check off; the tracker's own must raise the
    very text plain torch raises (the node's name, the output's number, the hint)."""
    with warnings.catch_warnings(), torch.autograd.set_detect_anomaly(anomaly):
        warnings.simplefilter("ignore")  # anomaly mode's report of where it happened
        torch.manual_seed(0)
        plain = _error_text(make)
        torch.manual_seed(0)
        watched = _error_text(make, make_tracker().hooks())
    assert "modified by an inplace operation" in plain
    assert watched == plain


def test_a_batch_sliced_from_a_data_set_counts_its_own_bytes_not_the_data_sets(make_tracker):
    """A view without history of a tensor the loop holds (a batch sliced from a data set):
    the graph keeps what the view reaches; the rest of the storage is the data set's."""
    data = torch.randn(4096, 20)
    weight = torch.nn.Parameter(torch.randn(20, 5))
    tracker = make_tracker()
    tracker.set_params((), {weight.data_ptr()})
    with tracker.hooks():
        batch = data[64:96]
        y = batch @ weight  # saves the batch (a view of data) and the weight
        ids = (torch.arange(1000) % 5)[10:42]  # token ids cut from a corpus
        z = torch.nn.functional.embedding(ids, weight.t())  # saves the ids, a view too
    assert tracker.live_bytes == batch.nbytes + ids.nbytes
    (y.sum() + z.sum()).backward()
    assert tracker.live_bytes == 0


def test_a_saved_view_of_an_activation_keeps_its_whole_buffer(make_tracker):
    """A view with history keeps its base, as autograd's own saved tensor does: the buffer
    it is a view of is the graph's, whole, even where only part of it is reached."""
    x = torch.randn(100, 10, requires_grad=True)
    tracker = make_tracker()
    with tracker.hooks():
        a = x * 2
        c = (a[:, :3] * a[:, 7:]).sum()  # saves two views of a, which then goes
    del a
    assert tracker.live_bytes == 100 * 10 * x.element_size()
    c.backward()
    assert tracker.live_bytes == 0


def test_slices_of_one_data_set_kept_by_graphs_past_their_step_count_their_union(
        make_tracker):
    data = torch.randn(64, 8)
    keep = []
    tracker = make_tracker()
    w = torch.randn(8, 2, requires_grad=True)
    for rows in ((0, 16), (8, 24)):  # overlapping batches, each graph kept past its step
        tracker.new_step()
        with tracker.hooks():
            keep.append((data[rows[0]:rows[1]] @ w).sum())
        tracker.end_step()
    union = (24 - 0) * 8 * data.element_size()
    assert tracker.retained_bytes == union and tracker.live_bytes == union
    keep.pop(0)
    assert tracker.retained_bytes == 16 * 8 * data.element_size()
    keep.clear()
    assert tracker.retained_bytes == 0 and tracker.live_bytes == 0


def test_a_saved_parameter_is_checked_too_but_never_counted_as_activation(make_tracker):
    weight = torch.nn.Parameter(torch.randn(4, 3))
    tracker = make_tracker()
    tracker.set_params((), {weight.data_ptr()})
    x = torch.randn(2, 4, requires_grad=True)
    with tracker.hooks():
        y = x @ weight  # saves x and the weight
    assert tracker.live_bytes == x.nbytes  # the weight is not an activation
    with torch.no_grad():
        weight.mul_(0.5)  # as optimizer.step() would, before this backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_saved_bytes_dedupe_views_and_release_after_backward(make_tracker):
    tracker = make_tracker()
    a = torch.randn(256, requires_grad=True)
    with tracker.hooks():
        b = a * 2
        c = b[:128].sin() + b[128:].cos()  # two views of one storage, saved twice
    assert tracker.live_bytes == 256 * 4
    c.sum().backward()
    assert tracker.live_bytes == 0


@pytest.mark.parametrize("preset", ["mlp", "cnn", "lstm", "gan", "transformer"])
def test_every_preset_trains_and_samples_every_phase(preset):
    history, summary = run(preset, steps=3, eval_every=2)
    assert summary.stopped_by == "completed" and summary.steps_done == 3
    phases = history.samples.column("phase")
    # start + 4 phases a step + one eval (its forward's end and the phase's)
    assert len(phases) == 1 + 3 * 4 + 2
    saved = steps_col(history, "saved_bytes")
    assert np.all(saved > 0) and np.all(steps_col(history, "graph_nodes") > 0)
    assert np.isfinite(steps_col(history, "loss")).all()


def test_gan_without_detach_errors_with_generator_explanation():
    _, summary = run("gan", steps=3, detach_state=False)
    assert summary.stopped_by == "error"
    assert "generator" in summary.error.explanation


def test_user_model_that_raises_becomes_an_event(monkeypatch):
    from memlens.core import presets

    calls = {"n": 0}
    original = presets.MlpPreset.forward_train

    def flaky(self, toggles):
        calls["n"] += 1
        if calls["n"] == 3:
            raise ValueError("shape mismatch in user code")
        return original(self, toggles)

    monkeypatch.setattr(presets.MlpPreset, "forward_train", flaky)
    history, summary = run("mlp", steps=5)
    assert summary.stopped_by == "error" and summary.error.step == 2
    assert "ValueError" in summary.error.message and summary.error.phase == "forward"
    assert len(history.steps) == 2


def test_nan_loss_is_an_error_event():
    _, summary = run("mlp", steps=30, optimizer="sgd", lr=100.0)
    assert summary.stopped_by == "error"
    assert summary.error.key == "non-finite loss"
    assert "learning rate" in summary.error.explanation


def test_precise_mode_gives_exact_peak_and_balanced_events():
    history, summary = run("mlp", steps=4, precise=True)
    peak = steps_col(history, "peak_bytes")
    totals = samples_at(history, "optimizer", "total")
    assert np.all(peak >= totals)
    # The in-step peak sees temporaries between phase boundaries that samples miss.
    assert peak.max() > history.samples.column("total").max()
    allocs = history.allocs.rows()
    idx = history.allocs.index
    live = np.cumsum(np.where(allocs[:, idx["action"]] == 0, 1, -1) * allocs[:, idx["bytes"]])
    assert live.max() == summary.peak_bytes
    # The tracker's live total equals the category sum at every sample.
    assert live[-1] == history.samples.column("total")[-1]


def test_config_defaults_validate():
    cfg = RunConfig()
    assert cfg.techniques.zero_grad == "set_to_none" and cfg.preset == "mlp"


def test_leak_cache_grows_other_by_the_kept_intermediates_and_is_named():
    history, _ = run("mlp", steps=12, leak_cache=True, batch_size=128,
                     at=("10:leak_cache=false",))
    other = samples_at(history, "optimizer", "other")
    # Each step keeps the penultimate features (128 x 64) and the logits (128 x 10), fp32.
    assert np.all(np.diff(other[:10]) == 4 * 128 * (64 + 10))
    assert other[10] < other[9]  # the fix drops what the bug kept
    leak = [e for e in history.events() if e.kind == "leak"]
    assert leak and "intermediates in a list" in leak[0].explanation


def test_fp16_uses_a_grad_scaler_and_reports_the_unscaled_grad_norm():
    fp32, _ = run("mlp", steps=3, optimizer="sgd", lr=0.0)
    fp16, summary = run("mlp", steps=3, optimizer="sgd", lr=0.0, amp="fp16")
    assert summary.stopped_by == "completed"
    # The scaler multiplies the loss by 65536; the reported norm must not be.
    np.testing.assert_allclose(steps_col(fp16, "grad_norm"), steps_col(fp32, "grad_norm"),
                               rtol=0.05)


def test_stop_asked_mid_step_aborts_before_the_optimizer_steps(monkeypatch):
    """A stop asked while a step runs (here: during step 2's forward, as a click on Stop
    would) ends it at the next phase edge: the step is not recorded, the optimizer does not
    step on a half-done step, and what the step measured before the stop is kept."""
    import memlens.core.loop
    import memlens.core.training
    from memlens.core.controls import RunControls

    cfg = tiny_config("mlp", steps=5)
    controls = RunControls(cfg.techniques, cfg.schedule)
    built = []
    at_stop: list[torch.Tensor] = []
    build = memlens.core.training.build_preset

    def build_and_hook(config, device):
        preset = build(config, device)
        built.append(preset)

        def during_forward(module, args, output):
            if preset.step_index == 2 and not at_stop:
                at_stop.extend(p.detach().clone() for p in preset.parameters())
                controls.stop()

        for model in preset.models.values():
            for module in model.modules():
                module.register_forward_hook(during_forward)
        return preset

    monkeypatch.setattr(memlens.core.training, "build_preset", build_and_hook)
    history = RunHistory()
    summary = memlens.core.loop.run_training(cfg, controls, history)
    assert summary.stopped_by == "stopped"
    assert list(steps_col(history, "step")) == [0.0, 1.0]
    step, phase = history.samples.column("step"), history.samples.column("phase")
    phases = {(int(a), SAMPLE_PHASES[int(b)]) for a, b in zip(step, phase, strict=True)}
    assert (2, "zero_grad") in phases and (2, "forward") in phases
    assert (2, "backward") not in phases and (2, "optimizer") not in phases
    assert at_stop and all(torch.equal(a, p) for a, p in
                           zip(at_stop, built[0].parameters(), strict=True))


def test_stop_hooks_come_off_for_short_steps_and_answer_a_stop_inside_long_ones():
    """Model hooks answer a stop inside a long forward; for steps shorter than
    SHORT_STEP_MS the phase edges answer soon enough and the hooks (which take the
    model off PyTorch's fast call path) come off; a long step puts them back."""
    from memlens.core.controls import RunControls, StopRequested
    from memlens.core.recorder.step import LONG_STEP_MS, SHORT_STEP_MS
    from memlens.core.training import TrainingSession

    cfg = tiny_config("gan", steps=3)
    controls = RunControls(cfg.techniques)
    session = TrainingSession(cfg, controls, RunHistory())
    models = list(session.preset.models.values())
    assert all(m._forward_pre_hooks for m in models)  # on until steps show they are short
    session.start_sample()
    # A fake phase clock (1 ms a reading) makes every step short, whatever the machine's load.
    ticks = iter(range(10**6))
    session.steps.clock = lambda: next(ticks) * 1e-3
    record = session.step(0, cfg.techniques, False)
    assert record.step_ms < SHORT_STEP_MS and not any(m._forward_pre_hooks for m in models)
    session.steps.tune_for_step_length(LONG_STEP_MS + 1)
    session.install_stop_hooks()
    controls.stop()
    with pytest.raises(StopRequested):  # at the model call, not at the next phase edge
        session.preset.forward_train(cfg.techniques)
    session.close()
    assert not any(m._forward_pre_hooks for m in models)


def test_long_steps_hand_each_sample_on_as_its_phase_ends_short_ones_at_the_step_end():
    """A live view of a long step sees forward's rise before backward runs. A short step
    hands its samples on together at its end (kept on the native edge where it is built), the
    same samples in the same order; a long step after it goes back to handing each on at
    once."""
    from memlens.core.controls import RunControls
    from memlens.core.recorder.step import LONG_STEP_MS, SHORT_STEP_MS
    from memlens.core.records import samples_of
    from memlens.core.training import TrainingSession

    cfg = tiny_config("mlp", steps=3)
    seen: list[tuple] = []

    class Sink(RunHistory):
        def on_samples(self, items):
            seen.extend((s.step, s.phase) for s in samples_of(items))
            super().on_samples(items)

        def on_steps(self, rows):
            for _, items in rows:
                seen.extend((s.step, s.phase) for s in samples_of(items))
            super().on_steps(rows)

    sink = Sink()
    session = TrainingSession(cfg, RunControls(cfg.techniques), sink)
    preset = session.preset
    forward_train = preset.forward_train

    def forward_noted(toggles):
        seen.append((preset.step_index, "forward begins"))
        return forward_train(toggles)

    preset.forward_train = forward_noted
    phases = ["zero_grad", "forward", "backward", "optimizer"]
    session.step(0, cfg.techniques, False)  # long, until a step shows otherwise
    assert seen == [(0, "zero_grad"), (0, "forward begins"), *[(0, p) for p in phases[1:]]]

    session.steps.tune_for_step_length(SHORT_STEP_MS - 1)
    seen.clear()
    session.step(1, cfg.techniques, False)
    assert seen == [(1, "forward begins"), *[(1, p) for p in phases]]

    session.steps.tune_for_step_length(LONG_STEP_MS + 1)
    seen.clear()
    session.step(2, cfg.techniques, False)
    assert seen[:2] == [(2, "zero_grad"), (2, "forward begins")]
    session.close()
    assert [int(x) for x in sink.samples.column("step")] == [0] * 4 + [1] * 4 + [2] * 4


def test_precise_tracker_skips_alias_only_ops_but_sees_a_resize():
    """Views and in-place ops cannot allocate and are skipped by their schema; resize_ can
    (it aliases self, yet grows the storage), so a grown storage is still an alloc event."""
    import time

    from memlens.core.recorder.precise import StorageTracker, _alias_only

    aten = torch.ops.aten
    assert _alias_only(aten.view.default) and _alias_only(aten.add_.Tensor)
    assert not _alias_only(aten.add.Tensor) and not _alias_only(aten.resize_.default)
    tracker = StorageTracker(time.perf_counter(), with_frames=False)
    with tracker:
        x = torch.ones(16)
        allocs_after_ones = len(tracker.drain())
        y = x.view(4, 4)
        y.add_(1.0)
        assert len(tracker.drain()) == 0  # a view and an in-place op: nothing new
        z = torch.empty(4)
        z.resize_(1024)
        events = tracker.drain().tuples()
    assert allocs_after_ones == 1
    grown = [e for e in events if e[1] == 0 and e[4] == 1024 * 4]
    assert len(grown) == 1, events
    assert tracker.live_bytes >= 1024 * 4 + 16 * 4


def test_saved_tracker_never_keeps_a_released_activation_alive(make_tracker):
    """The tracker looks at its holders only when it measures; until then it must hold them
    weakly, or backward could not free activations as it goes (a real peak distortion)."""
    import weakref

    tracker = make_tracker()
    a = torch.randn(1024, requires_grad=True)
    with tracker.hooks():
        b = a * 2
        c = b.sin()  # sin saves b
    storage = weakref.ref(b.untyped_storage())
    del b
    assert storage() is not None  # autograd still holds it for backward
    c.sum().backward()
    assert storage() is None  # gone at once, before any measure()
    assert tracker.live_bytes == 0


def test_a_graph_kept_past_its_step_stays_counted_until_dropped(make_tracker):
    tracker = make_tracker()
    a = torch.randn(512, requires_grad=True)
    tracker.new_step()
    with tracker.hooks():
        kept = (a * 3).exp()  # exp saves its output; mul saves nothing of a's size but a
    tracker.end_step()
    assert tracker.retained_bytes == 512 * 4 and tracker.live_bytes == 512 * 4
    tracker.new_step()
    assert tracker.live_bytes == 512 * 4  # still held by the graph a step later
    del kept
    assert tracker.retained_bytes == 0 and tracker.live_bytes == 0


def test_a_saved_output_makes_no_reference_cycle(make_tracker):
    """exp saves its own output; the hook must hold a detached alias of it, or the graph
    would hold itself and outlive every reference (freed only by a full collection)."""
    import gc
    import weakref

    tracker = make_tracker()
    a = torch.randn(1000, requires_grad=True)
    gc.disable()
    try:
        with tracker.hooks():
            y = a.exp()
        storage = weakref.ref(y.untyped_storage())
        assert tracker.live_bytes == 1000 * 4
        del y
        assert storage() is None  # freed by reference counting alone
    finally:
        gc.enable()
    assert tracker.live_bytes == 0


def test_a_leak_that_grows_once_per_eval_period_is_still_named():
    """With eval every 3 steps, total_loss += loss keeps one eval graph per period: memory
    grows in steps, not every step, and the leak is still found and named; with the eval
    under no_grad nothing is reported."""
    leaky, _ = run("mlp", steps=14, eval_every=3, leak_loss_sum=True, no_grad_eval=False)
    fixed, _ = run("mlp", steps=14, eval_every=3, leak_loss_sum=True, no_grad_eval=True)
    named = [e for e in leaky.events() if e.kind == "leak" and e.key == "memory growth"]
    assert len(named) == 1 and "total_loss += loss" in named[0].explanation
    assert not [e for e in fixed.events() if e.kind == "leak" and e.key == "memory growth"]
    # training's own sum still keeps its nodes (no tensor bytes): named apart, in both
    for run_ in (leaky, fixed):
        keys = [e.key for e in run_.events() if e.kind == "leak"]
        assert keys.count("graph kept across steps") == 1


def test_the_sum_of_squares_matches_torch_on_every_path():
    from memlens.core.recorder.recorder import sum_of_squares

    def norm(grads):
        return math.sqrt(sum_of_squares(grads))

    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(300, 200, generator=g), torch.randn(7, generator=g) * 1e3,
             torch.randn(5, 9, generator=g).t()]  # a non-contiguous one too
    expected = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))).item()
    assert norm(grads) == pytest.approx(expected, rel=1e-6)
    as_f64 = [t.double() for t in grads]
    assert norm(as_f64) == pytest.approx(expected, rel=1e-6)
    half = [t.to(torch.bfloat16) for t in grads]  # not numpy's: torch's path
    assert norm(half) == pytest.approx(expected, rel=1e-2)
    sparse = [grads[0].to_sparse(), grads[1]]  # one by one
    assert norm(sparse) == pytest.approx(expected_of(grads[:2]), rel=1e-6)
    assert norm([]) == 0.0
    assert math.isnan(norm([torch.tensor([1.0, math.nan])]))


def expected_of(grads):
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))).item()


@pytest.mark.parametrize("techniques", [
    {"zero_grad": "set_to_none"}, {"zero_grad": "zeros"}, {"zero_grad": "off"},
    {"accumulate": 2}, {"amp": "fp16", "optimizer": "sgd"},
], ids=lambda t: ",".join(f"{k}={v}" for k, v in t.items()))
def test_reported_grad_norm_is_the_norm_of_the_gradients_the_step_left(techniques):
    """The recorded norm equals a fresh one over the gradients the step left (the
    optimizers here do not write gradients; with fp16 the scaler unscales them in place,
    which the recorded norm reports too), in every zero_grad mode."""
    from memlens.core.controls import RunControls
    from memlens.core.training import TrainingSession

    cfg = tiny_config("gan", steps=4, **techniques)
    history = RunHistory()
    session = TrainingSession(cfg, RunControls(cfg.techniques), history)
    session.start_sample()
    toggles = RunControls(cfg.techniques).begin_step(0)[0]
    for step in range(4):
        record = session.step(step, toggles, False)
        grads = [p.grad for p in session.preset.parameters() if p.grad is not None]
        expected = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))).item()
        assert record.grad_norm == pytest.approx(expected, rel=1e-5), step
    session.close()

