"""Lessons on a model file: which lessons apply, the arms' settings, the CLI's report against
`run` and plain torch, bad files; and --quick's time figures, too few to be judged."""

from __future__ import annotations

import csv
import json

import pytest

import main
from memlens.core.lessons.adaptive import Budget
from memlens.core.lessons.catalog import LESSONS, lessons_for
from memlens.core.lessons.runner import QUICK_STEPS, LessonRunner
from tests.core.test_article_lessons import saved_bytes_of
from tests.core.test_cli_run import cli
from tests.core.test_lessons import TINY, _fake_timing
from tests.core.test_model_files import EXAMPLES, file_config, plain_forward, plain_module

CNN = EXAMPLES / "cnn_classifier.py"
GENERIC = {lesson.name for lesson in LESSONS
           if lesson.model_files == "any" and not lesson.needs_cuda}


def _names(preset) -> set[str]:
    return {lesson.name for lesson in lessons_for(str(preset), cuda=False)}


def test_a_model_file_gets_the_generic_lessons_and_detach_state_when_it_carries_state(
        tmp_path):
    assert {"no_grad_eval", "zero_grad", "amp_bf16", "retain_graph", "leak_loss_sum",
            "leak_loss_sum_eval"} <= GENERIC
    assert _names(CNN) == GENERIC | {"accumulate"}
    assert _names(EXAMPLES / "lstm_language_model.py") == GENERIC | {"accumulate",
                                                                     "detach_state"}
    # make_batch without a batch_size parameter: the batch cannot be made k times larger
    fixed = tmp_path / "fixed.py"
    fixed.write_text("import torch\n\ndef build_model():\n    return torch.nn.Linear(4, 2)\n\n"
                     "def make_batch(step, split):\n"
                     "    return torch.randn(8, 4), torch.zeros(8, dtype=torch.long)\n")
    assert _names(fixed) == GENERIC


def test_the_arms_settings_are_the_files_config_under_the_lessons():
    accumulate = next(lesson for lesson in LESSONS if lesson.name == "accumulate")
    configs = LessonRunner([str(CNN)])._configs(accumulate, str(CNN))
    plain = file_config(CNN)  # as `run --preset examples/cnn_classifier.py` builds it
    assert plain.batch_size == 16
    assert configs["on"].batch_size == 16 and configs["on"].techniques.accumulate == 4
    assert configs["off"].batch_size == 64 and configs["off"].techniques.accumulate == 1
    for cfg in configs.values():
        assert (cfg.preset, cfg.lr, cfg.optimizer) == (plain.preset, plain.lr, plain.optimizer)
        assert cfg.eval_every == 0 and cfg.steps > 0


def _last(folder, phase, column) -> int:
    with open(folder / "memory.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["phase"] == phase]
    return int(rows[-1][column])


def test_cli_quick_on_a_model_file_equals_run_and_plain_torch(tmp_path):
    out = tmp_path / "rep"
    p = cli("lessons", "--preset", str(CNN.relative_to(EXAMPLES.parent)), "--quick",
            "--lesson", "zero_grad", "no_grad_eval", "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "lessons.json").read_text())
    assert doc["presets"] == [str(CNN.resolve())] and doc["steps"] == QUICK_STEPS
    rows = {r["metric"]: r for r in doc["rows"]}
    assert {r["preset"] for r in doc["rows"]} == {"cnn_classifier"}
    assert (out / "runs" / "cnn_classifier-zero_grad-off" / "memory.csv").exists()
    assert (out / "charts" / "cnn_classifier-zero_grad.svg").exists()

    # the same runs made with `run`
    runs = {}
    for name, sets in (("zeros", ["eval_every=0", "zero_grad=zeros"]),
                       ("set_to_none", ["eval_every=0", "zero_grad=set_to_none"]),
                       ("grad", ["eval_every=1", "no_grad_eval=false", "eval_mode=false"]),
                       ("no_grad", ["eval_every=1", "no_grad_eval=true", "eval_mode=true"])):
        runs[name] = tmp_path / name
        assert main.main(["run", "--preset", str(CNN), "--steps", str(QUICK_STEPS), "--quiet",
                          "--set", *sets, "--out", str(runs[name])]) == 0
    grads = rows["grads at zero_grad"]
    assert grads["off"] == _last(runs["zeros"], "zero_grad", "grads_bytes")
    assert grads["on"] == _last(runs["set_to_none"], "zero_grad", "grads_bytes") == 0
    held = rows["eval-forward activations"]
    assert held["off"] == _last(runs["grad"], "eval_forward", "activations_bytes")
    assert held["on"] == _last(runs["no_grad"], "eval_forward", "activations_bytes") == 0

    # independent: the file's model in plain torch
    mod = plain_module(CNN)
    model = mod.build_model()
    assert grads["off"] == sum(p.numel() * p.element_size() for p in model.parameters())
    model.train()  # the off arm validates in train mode, under grad
    inputs, targets = mod.make_batch(0, "eval", batch_size=16)

    def eval_loss():
        out, loss_fn = plain_forward(mod, model, inputs, 16)
        return loss_fn(out, targets)

    expected = saved_bytes_of(eval_loss, list(model.parameters()), list(model.buffers()))
    assert held["off"] == expected > 0
    # the boundary figure is shown beside the eval forward's peak, which is judged
    assert grads["verdict"] == "confirmed" and held["verdict"] == ""
    assert rows["eval-forward peak"]["verdict"]


def test_a_bad_model_file_exits_2_with_the_model_file_message(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef build_model(:\n    pass\n")
    assert main.main(["lessons", "--preset", str(bad), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: syntax error" in err
    assert not (tmp_path / "a" / "lessons.json").exists()

    # a file that only fails when run: build_model returns no Module
    odd = tmp_path / "odd.py"
    odd.write_text("import torch\n\ndef build_model():\n    return 3\n\n"
                   "def make_batch(step, split):\n"
                   "    return torch.randn(8, 4), torch.zeros(8, dtype=torch.long)\n")
    assert main.main(["lessons", "--preset", str(odd), "--quick", "--quiet",
                      "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "build_model() returned int, not a torch.nn.Module" in err
    assert not (tmp_path / "b" / "lessons.json").exists()

    assert main.main(["lessons", "--preset", str(tmp_path / "gone.py"),
                      "--out", str(tmp_path / "c")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_quick_judges_a_50_percent_slowdown_within_its_budget(monkeypatch):
    """A real 50% slowdown on the fake clock: quick's rounds go on until it is called."""
    from memlens.core.lessons.report import change_text

    _fake_timing(monkeypatch, "on", 1.5)
    report = LessonRunner(["mlp"], quick=True, settings=TINY, names=("no_grad_eval",)).run()
    row = next(r for r in report.rows if r.metric == "eval time")
    assert row.steps["off"] > QUICK_STEPS  # rounds were added
    assert row.significant and row.ci_low > 1.0
    assert row.verdict == "contradicted"  # the claim: about 20% faster
    assert "(too few samples)" not in change_text(row)
    # the memory rows of the same quick report are exact, and judged
    peak = next(r for r in report.rows if r.metric == "eval-forward peak")
    assert peak.exact and peak.verdict in ("confirmed", "larger", "smaller")


@pytest.mark.parametrize("preset", ["mlp", str(CNN)])
def test_quick_memory_figures_equal_the_full_reports(preset):
    """Quick's few steps give the bytes that more steps give (the sizes kept tiny)."""
    settings = TINY if preset == "mlp" else {}
    names = ("zero_grad", "amp_bf16", "accumulate", "leak_loss_sum_eval")
    base_only = Budget(step_s=0.0, max_blocks=0)  # memory: no rounds for time claims
    quick = LessonRunner([preset], quick=True, settings=settings, names=names,
                         budget=base_only).run()
    longer = LessonRunner([preset], steps=12, block=2, settings=settings, names=names,
                          budget=base_only).run()
    figures = {(r.lesson, r.metric): (r.off, r.on) for r in longer.rows if r.kind == "memory"}
    assert figures
    assert {(r.lesson, r.metric): (r.off, r.on) for r in quick.rows
            if r.kind == "memory"} == figures
