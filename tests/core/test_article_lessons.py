"""Every lesson of the article moves the right figure by the right bytes, checked against
independent counts on plain torch (saved_tensors_hooks on a plain copy of the preset)."""

from __future__ import annotations

import pytest
import torch

import core.native
from core.config import TechniqueToggles
from core.presets import build_preset
from tests.core.helpers import TINY as TINY_SETS
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

    from core.loop import run_training
    from core.run_files import RunWriter, load_run

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
    from core.explain import explain_error

    exc = RuntimeError("could not create a primitive descriptor")
    toggles = TechniqueToggles()
    assert "paused" in explain_error(exc, "lstm", "forward", toggles, "pause")
    stop = explain_error(exc, "lstm", "forward", toggles, "stop")
    assert "paused" not in stop and "status 3" in stop
    assert "goes on" in explain_error(exc, "lstm", "forward", toggles, "continue")
