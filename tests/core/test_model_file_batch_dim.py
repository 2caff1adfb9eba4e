"""The batch dimension of a model file's batch: sequence-first RNNs and transformers,
batch-first ones, declared in CONFIG, and files where it cannot be told (exit 2, how to
declare it). Figures are compared with plain torch on the file's own model."""

from __future__ import annotations

from pathlib import Path

import pytest

import main
from memlens.core.lessons.catalog import lessons_for
from memlens.core.lessons.runner import LessonRunner
from memlens.core.model_file_preflight import estimate_model_file_memory
from tests.core.helpers import samples_at
from tests.core.test_article_lessons import saved_bytes_of
from tests.core.test_model_files import file_config, plain_forward, plain_module, run_file

FILES = Path(__file__).parent / "model_files"
GRU = FILES / "gru_seq_first.py"
LSTM = FILES / "lstm_batch_first.py"
TRANSFORMER = FILES / "transformer_seq_first.py"


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_a_sequence_first_gru_is_run_with_its_batch_in_dimension_1():
    """The issue's file: x (10, 8), init_state(8) -> (1, 8, 48), CONFIG batch_size 8."""
    history, summary, _ = run_file(GRU, steps=3, eval_every=1, no_grad_eval=False,
                                   eval_mode=False)
    assert summary.stopped_by == "completed"
    assert history.meta["environment"]["sizes"]["batch_size"] == 8
    # the carried state is init_state(8)'s: 1 x 8 x 48 floats, counted in `other`
    mod = plain_module(GRU)
    assert samples_at(history, "forward", "other")[-1] == _nbytes(mod.init_state(8))
    # the eval forward under grad holds what plain torch's saved_tensors_hooks count
    model = mod.build_model()
    inputs, targets = mod.make_batch(0, "eval")

    def eval_loss():
        out, loss_fn = plain_forward(mod, model, inputs, 8)
        return loss_fn(out, targets)

    expected = saved_bytes_of(eval_loss, list(model.parameters()), list(model.buffers()))
    assert samples_at(history, "eval_forward", "activations")[-1] == expected > 0


def test_the_memory_check_counts_the_sequence_first_state_at_its_batch_size():
    estimate = estimate_model_file_memory(file_config(GRU))
    assert estimate is not None  # init_state(10) made a state the GRU refused: no estimate
    mod = plain_module(GRU)
    x, y = mod.make_batch(0, "train")
    assert estimate.data == _nbytes(x, y, mod.init_state(8))
    assert estimate.params == _nbytes(*mod.build_model().parameters())


@pytest.mark.parametrize("path", [GRU, LSTM, TRANSFORMER], ids=lambda p: p.stem)
def test_each_file_runs_all_its_lessons(path):
    names = {lesson.name for lesson in lessons_for(str(path), cuda=False)}
    report = LessonRunner([str(path)], quick=True).run()
    assert {r.lesson for r in report.rows} == names
    mod = plain_module(path)
    params = _nbytes(*mod.build_model().parameters())
    rows = {(r.lesson, r.metric): r for r in report.rows}
    assert rows[("zero_grad", "grads at zero_grad")].off == params
    assert rows[("zero_grad", "grads at zero_grad")].on == 0
    assert rows[("no_grad_eval", "eval-forward activations")].on == 0
    assert rows[("no_grad_eval", "eval-forward activations")].off > 0
    if "accumulate" in names:  # the off arm's one batch is 4×B along the batch dimension
        arms = report.histories[("accumulate", path.stem)]
        batch = file_config(path).batch_size
        assert arms["on"].meta["environment"]["sizes"]["batch_size"] == batch
        assert arms["off"].meta["environment"]["sizes"]["batch_size"] == 4 * batch
        assert rows[("accumulate", "step peak less the data set")].verdict == "confirmed"
    if "detach_state" in names:
        assert rows[("detach_state", "training errors")].verdict == "confirmed"


def _file(tmp_path, body: str, config: str = "") -> Path:
    path = tmp_path / "m.py"
    path.write_text("import torch\nfrom torch import nn\n" + config + "\n" + body)
    return path


SEQ_FIRST_LINEAR = """
def build_model():
    return nn.Linear(4, 3)

def make_batch(step, split):
    return torch.randn(6, 7, 4), torch.zeros(6, 7, dtype=torch.long)
"""


def test_a_declared_batch_dim_is_followed(tmp_path):
    path = _file(tmp_path, SEQ_FIRST_LINEAR, "CONFIG = {'batch_dim': 1}")
    history, summary, _ = run_file(path, steps=2)
    assert summary.stopped_by == "completed"
    assert history.meta["environment"]["sizes"]["batch_size"] == 7


def test_without_a_batch_size_the_models_batch_first_says_which_dimension(tmp_path):
    """The GRU file with no batch size anywhere: its nn.GRU (batch_first=False) says the
    batch is dimension 1, so init_state gets 8, not the sequence length 10."""
    path = tmp_path / "gru.py"
    path.write_text(GRU.read_text().replace('CONFIG = {"batch_size": 8}', ""))
    history, summary, _ = run_file(path, steps=2)
    assert summary.stopped_by == "completed", summary.error
    assert history.meta["environment"]["sizes"]["batch_size"] == 8


def _refused(capsys, path, tmp_path) -> str:
    rc = main.main(["run", "--preset", str(path), "--steps", "1", "--quiet",
                    "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    problems = [line for line in err.splitlines() if line.startswith("memlens run:")]
    assert len(problems) == 1, err  # one line that says what is wrong and what to do
    return problems[0]


def test_an_undecidable_batch_dim_is_refused_with_how_to_declare_it(tmp_path, capsys):
    body = SEQ_FIRST_LINEAR.replace("torch.randn(6, 7, 4), torch.zeros(6, 7,",
                                    "torch.randn(6, 7, 7, 4), torch.zeros(6, 7, 7,")
    path = _file(tmp_path, body, "CONFIG = {'batch_size': 7}")
    err = _refused(capsys, path, tmp_path)
    assert "dimensions 1 and 2 all have batch_size=7" in err
    assert "CONFIG = {'batch_dim': 1" in err


def test_a_batch_size_no_dimension_has_is_refused(tmp_path, capsys):
    path = _file(tmp_path, SEQ_FIRST_LINEAR, "CONFIG = {'batch_size': 5}")
    err = _refused(capsys, path, tmp_path)
    assert "inputs of shape (6, 7, 4), but batch_size=5 is set" in err


@pytest.mark.parametrize("value, says", [(3, "have no dimension 3"),
                                         ("'1'", "batch_dim must be a dimension")])
def test_a_bad_batch_dim_is_refused(tmp_path, capsys, value, says):
    path = _file(tmp_path, SEQ_FIRST_LINEAR, f"CONFIG = {{'batch_dim': {value}}}")
    assert says in _refused(capsys, path, tmp_path)


def test_targets_of_another_size_are_named_with_the_batch_dimension(tmp_path, capsys):
    body = SEQ_FIRST_LINEAR.replace("torch.zeros(6, 7,", "torch.zeros(6, 5,")
    path = _file(tmp_path, body, "CONFIG = {'batch_dim': 1}")
    err = _refused(capsys, path, tmp_path)
    assert "inputs hold 7 samples but targets 5 (the batch is dimension 1" in err


def test_plain_torch_agrees_the_gru_file_is_sequence_first():
    """The test file itself: a plain loop at batch 8 runs, one at 10 (dimension 0) fails."""
    mod = plain_module(GRU)
    model = mod.build_model()
    x, _ = mod.make_batch(0, "train")
    model(x, mod.init_state(8))
    with pytest.raises(RuntimeError):
        model(x, mod.init_state(10))
