"""Every lesson of the article moves the right figure by the right bytes, checked against
independent counts on plain torch (saved_tensors_hooks on a plain copy of the preset)."""

from __future__ import annotations

import pytest
import torch

import memlens.core.native
import memlens.core.recorder.recorder
from memlens.core.config import TechniqueToggles
from memlens.core.preset_factory import build_preset
from memlens.core.units import format_bytes
from tests.core.helpers import TINY as TINY_SETS
from tests.core.helpers import run, samples_at, tiny_config

PRESETS = ("mlp", "cnn", "lstm", "gan", "transformer")


def _python_helpers(monkeypatch) -> None:
    monkeypatch.setattr(memlens.core.native, "load", lambda build=True: None)
    monkeypatch.setattr(memlens.core.native, "unavailable_reason", lambda: "no compiler (test)")


def _reached(t) -> tuple[int, int]:
    """[first, last] byte of its storage a tensor reaches, read off the element offsets a
    strided view of the storage's indices gives."""
    size = t.element_size()
    offsets = torch.arange(t.untyped_storage().nbytes() // size).as_strided(
        t.shape, t.stride(), t.storage_offset())
    return int(offsets.min()) * size, (int(offsets.max()) + 1) * size


def saved_bytes_of(fn, params, buffers=(), data=None) -> int:
    """Bytes autograd saves for backward while `fn()` runs, each storage once, parameters'
    and buffers' storages left out: a plain saved_tensors_hooks count that keeps every saved
    tensor alive until the end (so no two live storages share an address). A tensor without
    history (data, token ids) counts the bytes it reaches in its storage, several of one
    storage their union; any other the whole storage. With `data` (the tensors the loop
    holds), only a view of one of those counts what it reaches: a batch `fn` made and sliced
    is autograd's alone, all of it (what precise mode, which sees allocations, counts)."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in (*params, *buffers)}
    held = None if data is None else {t.untyped_storage().data_ptr() for t in data}
    whole: dict[int, int] = {}
    reached: dict[int, set] = {}

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr and ptr not in param_ptrs:
            if t.requires_grad or t.numel() == 0 or (held is not None and ptr not in held):
                whole[ptr] = st.nbytes()
            else:
                lo, hi = _reached(t)
                reached.setdefault(ptr, set()).update(range(lo, hi))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(whole.values()) + sum(len(b) for p, b in reached.items() if p not in whole)


def _buffers(p) -> list:
    return [b for m in p.models.values() for b in m.buffers()]


def plain_eval_saved_bytes(preset: str, precise: bool = False) -> int:
    """What one eval forward under grad saves, on a plain copy of the preset in eval mode
    (`precise`: a batch the forward made counts whole)."""
    p = build_preset(tiny_config(preset), torch.device("cpu"))
    p.set_train(False)
    return saved_bytes_of(lambda: p.forward_eval(TechniqueToggles()), p.parameters(),
                          _buffers(p), p.data_tensors() if precise else None)


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
    expected = plain_eval_saved_bytes(preset, precise=mode == "precise")
    assert expected > 0
    assert under_grad == expected
    assert under_no_grad == 0
    # `eval` still names the end of the eval phase, once the eval loss is gone.
    assert list(samples_at(history, "eval", "activations")) == [0, 0]


def _cli(tmp_path, capsys, *args: str) -> tuple[int, str, list[dict], dict]:
    """main.py in this process: (exit code, stdout + stderr, memory.csv rows, run.json)."""
    import csv
    import json

    import main

    out = tmp_path / "r"
    rc = main.main(["run", *args, "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    with open(out / "memory.csv", newline="") as fh:
        memory = list(csv.DictReader(fh))
    doc = json.loads((out / "run.json").read_text())
    return rc, printed.out + printed.err, memory, doc


@pytest.mark.parametrize(("preset", "sets", "failed_at"), [
    ("gan", ["detach_state=false"], 0),
    ("lstm", ["detach_state=false"], 1),
])
def test_summary_peak_covers_every_sample_after_an_error(tmp_path, capsys, preset, sets,
                                                         failed_at):
    tiny = [f"{k}={v}" for k, v in TINY_SETS[preset].items()]
    rc, printed, memory, doc = _cli(tmp_path, capsys, "--preset", preset, "--steps", "4",
                                    "--set", *tiny, *sets)
    assert rc == 3 and doc["summary"]["error"]["step"] == failed_at
    totals = [int(r["total_bytes"]) for r in memory]
    assert int(memory[-1]["step"]) == failed_at  # the failed step's samples are in the file
    peak = doc["summary"]["peak_bytes"]
    assert peak > 0 and peak >= max(totals)
    assert "up to step -1" not in printed
    assert "exits with status 3" in printed  # the explanation says what the CLI did


def test_lstm_switching_amp_back_and_forth_runs_to_the_end():
    _, summary = run("lstm", steps=8, at=("2:amp=bf16", "4:amp=off", "6:amp=fp16"))
    assert summary.stopped_by == "completed" and summary.steps_done == 8


def test_steps_csv_says_when_the_optimizer_stepped_and_whether_the_peak_is_exact(tmp_path):
    import csv

    from memlens.core.loop import run_training
    from memlens.core.runfolder.reader import load_run
    from memlens.core.runfolder.writer import RunWriter

    for precise in (False, True):
        out = tmp_path / f"p{precise}"
        cfg = tiny_config("mlp", 4, accumulate=2, precise=precise)
        run_training(cfg, sink=RunWriter(out, precise=precise))
        with open(out / "steps.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert [r["optimizer_stepped"] for r in rows] == ["0", "1", "0", "1"]
        assert {r["peak_is_exact"] for r in rows} == {"1" if precise else "0"}
        history = load_run(out)
        assert list(history.steps.column("optimizer_stepped")) == [0, 1, 0, 1]


@pytest.mark.parametrize(("kind", "state_tensors"), [
    ("sgd", 0), ("momentum", 1), ("adam", 3), ("adamw", 3)])
def test_optimizer_choices_are_what_they_say(kind, state_tensors):
    p = build_preset(tiny_config("mlp", optimizer=kind), torch.device("cpu"))
    (opt,) = p.optimizers
    assert type(opt) is {"sgd": torch.optim.SGD, "momentum": torch.optim.SGD,
                         "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
    if kind in ("sgd", "momentum"):
        assert opt.defaults["momentum"] == (0.9 if kind == "momentum" else 0)
    loss = p.forward_train(TechniqueToggles()).report_loss
    loss.backward()
    opt.step()
    first = next(iter(opt.state.values()), {})
    assert sum(isinstance(v, torch.Tensor) for v in first.values()) == state_tensors


def test_an_error_explanation_says_what_the_caller_does():
    from memlens.core.explain import explain_error

    exc = RuntimeError("could not create a primitive descriptor")
    toggles = TechniqueToggles()
    assert "paused" in explain_error(exc, "lstm", "forward", toggles, "pause")
    stop = explain_error(exc, "lstm", "forward", toggles, "stop")
    assert "paused" not in stop and "status 3" in stop
    assert "goes on" in explain_error(exc, "lstm", "forward", toggles, "continue")


def plain_train_saved_bytes(preset: str) -> int:
    """What one training forward saves, on a plain copy of the preset."""
    p = build_preset(tiny_config(preset), torch.device("cpu"))
    return saved_bytes_of(lambda: p.forward_train(TechniqueToggles()), p.parameters(),
                          _buffers(p))


@pytest.mark.parametrize("mode", ["light", "python", "precise"])
def test_retain_graph_keeps_the_saved_tensors_while_the_loop_holds_loss(mode, monkeypatch):
    if mode == "python":
        _python_helpers(monkeypatch)
    expected = plain_train_saved_bytes("mlp")
    kept, _ = run("mlp", steps=3, retain_graph=True, precise=mode == "precise")
    freed, _ = run("mlp", steps=3, retain_graph=False, precise=mode == "precise")
    # A user's loop keeps `loss` bound through the optimizer step and into the next step's
    # zero_grad; the next forward rebinds it.
    assert list(samples_at(kept, "optimizer", "activations")) == [expected] * 3
    assert list(samples_at(kept, "zero_grad", "activations")) == [0, expected, expected]
    assert list(samples_at(kept, "forward", "activations")) == [expected] * 3
    assert list(samples_at(freed, "optimizer", "activations")) == [0] * 3
    assert list(samples_at(freed, "zero_grad", "activations")) == [0] * 3


@pytest.mark.parametrize("preset", PRESETS)
def test_intermediates_are_kept_only_for_leak_cache(preset):
    p = build_preset(tiny_config(preset), torch.device("cpu"))
    off = p.forward_train(TechniqueToggles())
    on = p.forward_train(TechniqueToggles(leak_cache=True))
    assert off.intermediates == [] and len(on.intermediates) > 0
    assert len(off.outputs) == len(on.outputs) > 0


def test_leak_texts_say_what_is_held_with_the_bytes():
    from memlens.core.explain import explain_leak
    from memlens.core.units import format_figures

    train = explain_leak(TechniqueToggles(leak_loss_sum=True), "other", 10_000)
    assert "autograd nodes" in train and "heap" in train and "graph alive" not in train
    history, _ = run("mlp", steps=14, eval_every=1, leak_loss_sum=True, no_grad_eval=False)
    # the tensor bytes eval's graphs keep (training's kept nodes are "graph kept")
    (leak,) = [e for e in history.events() if e.kind == "leak" and e.key == "memory growth"]
    per_eval = plain_eval_saved_bytes("mlp")
    assert "saved tensors" in leak.explanation
    assert f"{format_bytes(per_eval)} per eval" in leak.explanation
    cache = format_figures(explain_leak(TechniqueToggles(leak_cache=True), "other", 3 * 2**20))
    assert "intermediates in a list that is never cleared (3.00 MiB of tensors a step)" in cache


def _fake_clock(rng, slow_from: list):
    """A phase clock whose every phase takes 1 ms times log-normal noise (sigma 0.3), and
    1.5 times that from the step `slow_from[0]` names, if any (set by a sink)."""
    t = [0.0]
    state = {"step": -1}

    def tick() -> float:
        factor = 1.5 if slow_from and state["step"] >= slow_from[0] else 1.0
        t[0] += 1e-3 * factor * float(rng.lognormal(0.0, 0.3))
        return t[0]

    return tick, state


class _StepCounter:
    """A sink that tells the fake clock which step runs (toggles come before the step)."""

    def __init__(self, state: dict) -> None:
        self.state = state

    def on_event(self, e) -> None:
        self.state["step"] = e.step

    def on_steps(self, rows) -> None:
        self.state["step"] = rows[-1][0].step + 1

    def __getattr__(self, name):
        return lambda *a: None


def _effect_with_fake_clock(monkeypatch, seed: int, slowdown: bool):
    import numpy as np

    import memlens.core.loop
    from memlens.core.effects import toggle_effect

    rng = np.random.default_rng(seed)
    slow_from = [10] if slowdown else []
    tick, state = _fake_clock(rng, slow_from)
    monkeypatch.setattr(memlens.core.recorder.recorder, "phase_clock",
                        lambda device, synchronize=True: (tick, "fake clock (test)"))
    history, summary = run("mlp", steps=20, at=("10:zero_grad=zeros",),
                           sink=_StepCounter(state))
    assert summary.stopped_by == "completed"
    (event,) = [e for e in history.events() if e.kind == "toggle"]
    return history, toggle_effect(history, event)


def test_a_toggle_without_a_time_effect_is_within_noise_and_a_real_slowdown_is_not(
        monkeypatch):
    flat = [_effect_with_fake_clock(monkeypatch, seed, False)[1] for seed in range(10)]
    insignificant = sum(not e.time.significant for e in flat)
    assert insignificant >= 6, [e.time for e in flat]
    quiet = next(e for e in flat if not e.time.significant)
    assert "step time within noise (±" in quiet.text()
    history, slow = _effect_with_fake_clock(monkeypatch, 99, True)
    assert slow.time.significant and slow.time.low > 1.2
    assert slow.as_dict()["significant"] is True
    # zero_grad=zeros keeps the gradients allocated at zero_grad: exact bytes, the params'.
    params = int(samples_at(history, "start", "params")[0])
    assert slow.memory_change["zero_grad"] == params
    assert slow.as_dict()["memory_bytes"]["zero_grad"]["change"] == params


def test_an_effect_window_cut_by_a_later_toggle_or_an_error_says_so(tmp_path, capsys):
    rc, printed, _, doc = _cli(tmp_path, capsys, "--preset", "mlp", "--steps", "16",
                               "--set", "batch_size=32", "width=64", "eval_every=1",
                               "--at", "4:no_grad_eval=false", "8:no_grad_eval=true")
    assert rc == 0
    toggles = [e for e in doc["events"] if e["kind"] == "toggle"]
    first, second = (e["effect"] for e in toggles)
    assert first["after_steps"] == 4 and first["cut"] == "superseded at step 8"
    assert "measured over 4 steps; superseded at step 8" in first["text"]
    # The eval forward's graph: exactly what the eval forward saves, at eval_forward.
    per_eval = plain_eval_saved_bytes("mlp")
    assert first["memory_bytes"]["eval_forward"]["change"] == per_eval
    assert second["memory_bytes"]["eval_forward"]["change"] == -per_eval
    assert first["text"].startswith(
        f"no_grad_eval: true -> false: {format_bytes(per_eval, signed=True)} at eval_forward")
    for e in (first, second):  # the CLI prints run.json's text
        assert e["text"] in printed
    # An error cuts the window: lstm without detach fails at the step after the toggle.
    rc, printed, _, doc = _cli(tmp_path / "2", capsys, "--preset", "lstm", "--steps", "8",
                               "--set", "batch_size=4", "width=32", "seq_len=8",
                               "--on-error", "continue", "--at", "3:detach_state=false",
                               "6:detach_state=true")
    (off, on) = (e["effect"] for e in doc["events"] if e["kind"] == "toggle")
    assert off["after_steps"] == 0 and off["cut"] == "cut by an error at step 3"
    assert "no steps after it to compare with (cut by an error at step 3)" in off["text"]
    assert on["after_steps"] == 2 and on["cut"] == "run ended at step 7"


@pytest.mark.parametrize("mode", ["light", "python", "precise"])
def test_amp_weight_copies_are_their_own_category_not_activations(mode, monkeypatch):
    if mode == "python":
        _python_helpers(monkeypatch)
    # Independently: one bf16 training forward of a plain copy under autocast, every saved
    # storage once; the weight copies are the saved tensors equal to a bf16 cast of a weight.
    p = build_preset(tiny_config("mlp"), torch.device("cpu"))
    weights = [m.weight for m in p.models["model"] if isinstance(m, torch.nn.Linear)]
    held: dict[int, torch.Tensor] = {}

    def pack(t):
        held.setdefault(t.untyped_storage().data_ptr(), t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        out = p.forward_train(TechniqueToggles(amp="bf16"))
    params = {q.untyped_storage().data_ptr() for q in p.parameters()}
    saved = {ptr: t for ptr, t in held.items() if ptr not in params}
    casts = sum(t.untyped_storage().nbytes() for t in saved.values()
                if t.dtype == torch.bfloat16 and any(
                    t.numel() == w.numel() and torch.equal(t.reshape(w.shape) if t.is_contiguous()
                                                           else t.t(), w.to(torch.bfloat16))
                    for w in weights))
    total = sum(t.untyped_storage().nbytes() for t in saved.values())
    del out
    assert casts > 0
    history, summary = run("mlp", steps=3, amp="bf16", precise=mode == "precise")
    assert summary.stopped_by == "completed"
    assert list(samples_at(history, "forward", "amp_casts")) == [casts] * 3
    assert list(samples_at(history, "forward", "activations")) == [total - casts] * 3
    # backward frees them with the rest of the graph
    assert list(samples_at(history, "backward", "amp_casts")) == [0] * 3


@pytest.mark.parametrize("mode", ["light", "python", "precise"])
def test_buffers_are_counted_once_in_their_own_category(mode, monkeypatch):
    if mode == "python":
        _python_helpers(monkeypatch)
    cnn = build_preset(tiny_config("cnn"), torch.device("cpu"))
    norms = [m for m in cnn.models["model"] if isinstance(m, torch.nn.BatchNorm2d)]
    bn_bytes = sum(t.nbytes for m in norms for t in (m.running_mean, m.running_var,
                                                       m.num_batches_tracked))
    history, _ = run("cnn", steps=2, precise=mode == "precise")
    assert set(samples_at(history, "forward", "buffers")) == {bn_bytes}
    lm = build_preset(tiny_config("transformer"), torch.device("cpu")).models["model"]
    history, _ = run("transformer", steps=2, precise=mode == "precise")
    assert set(samples_at(history, "start", "buffers")) == {lm.mask.nbytes}


@pytest.mark.parametrize("preset", ["mlp", "lstm", "cnn"])
def test_other_means_the_same_in_light_and_precise_mode(preset):
    light, _ = run(preset, steps=3, leak_cache=True)
    precise, _ = run(preset, steps=3, leak_cache=True, precise=True)
    for column in ("other", "buffers", "activations"):
        assert list(light.samples.column(column)) == list(precise.samples.column(column))
    assert not light.samples.column("temporaries").any()
    # precise mode sees the logits and loss the loop keeps bound after forward
    assert samples_at(precise, "forward", "temporaries").min() > 0
