"""Model files as presets: the examples' bytes against plain torch, carried state, the CLI."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import main
from memlens.core.config import RunConfig, ScheduledChange
from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.loop import run_training
from memlens.core.model_file import with_model_file
from tests.core.helpers import samples_at
from tests.core.test_article_lessons import saved_bytes_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXAMPLE_FILES = ("cnn_classifier.py", "lstm_language_model.py", "tiny_transformer.py")


def file_config(path: Path | str, **values) -> RunConfig:
    """The config a CLI run of this file with --set VALUES gets (its CONFIG underneath)."""
    over = {"preset": str(path), "eval_every": 0, **values}
    return with_model_file(RunConfig().with_values(over), lambda base: base.with_values(over))


def run_file(path, controls=None, on_error="stop", at=(), **values):
    cfg = file_config(path, **values)
    cfg = cfg.with_schedule([ScheduledChange.parse(a) for a in at]) if at else cfg
    history = RunHistory()
    controls = controls or RunControls(cfg.techniques, cfg.schedule)
    summary = run_training(cfg, controls, history, on_error=on_error)
    return history, summary, cfg


def plain_module(path: Path):
    """The example imported as plain Python, apart from memlens."""
    spec = importlib.util.spec_from_file_location(f"plain_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_params_grads_and_optimizer_bytes_equal_plain_torch(name):
    path = EXAMPLES / name
    history, summary, cfg = run_file(path, steps=2)
    assert summary.stopped_by == "completed"

    # The same model and one plain training step, written as a user would.
    mod = plain_module(path)
    torch.manual_seed(cfg.seed)
    model = mod.build_model()
    opt_class = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[cfg.optimizer]
    opt = opt_class(model.parameters(), lr=cfg.lr)
    inputs, targets = mod.make_batch(0, "train", batch_size=cfg.batch_size)
    out, loss_fn = plain_forward(mod, model, inputs, cfg.batch_size)
    loss_fn(out, targets).backward()
    opt.step()
    params = sum(p.nbytes for p in model.parameters())
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    state = unique_bytes(t for s in opt.state.values() for t in s.values()
                         if isinstance(t, torch.Tensor))

    assert params > 0 and grads > 0 and state > 0
    assert np.all(samples_at(history, "start", "params") == params)
    assert np.all(samples_at(history, "backward", "grads") == grads)
    assert samples_at(history, "optimizer", "optimizer")[0] == state
    assert samples_at(history, "zero_grad", "optimizer")[0] == 0  # before the first step


def plain_forward(mod, model, inputs, batch_size: int):
    """The file's model and loss on one batch, as a user's loop calls them."""
    if hasattr(mod, "init_state"):
        out, _ = model(inputs, mod.init_state(batch_size))
    else:
        out = model(inputs)
    loss_fn = getattr(mod, "loss_fn", None) or (lambda o, t: torch.nn.functional.cross_entropy(
        o.reshape(-1, o.shape[-1]), t.reshape(-1)))
    return out, loss_fn


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_eval_forward_activations_equal_a_plain_saved_tensor_count(name):
    path = EXAMPLES / name
    history, summary, cfg = run_file(path, steps=2, eval_every=1, no_grad_eval=False,
                                     at=("1:no_grad_eval=true",))
    assert summary.stopped_by == "completed"
    under_grad, under_no_grad = samples_at(history, "eval_forward", "activations")

    mod = plain_module(path)
    torch.manual_seed(cfg.seed)
    model = mod.build_model().eval()
    inputs, targets = mod.make_batch(0, "eval", batch_size=cfg.batch_size)

    def eval_loss():
        out, loss_fn = plain_forward(mod, model, inputs, cfg.batch_size)
        return loss_fn(out, targets)

    # Buffers (BatchNorm's running stats, saved by its eval backward) count as buffers.
    expected = saved_bytes_of(eval_loss, list(model.parameters()), list(model.buffers()))
    assert expected > 0
    assert under_grad == expected
    assert under_no_grad == 0


def test_file_config_sits_under_the_settings_given():
    cfg = file_config(EXAMPLES / "cnn_classifier.py")
    assert (cfg.batch_size, cfg.lr, cfg.eval_every) == (16, 1e-3, 0)  # eval_every given here
    cfg = file_config(EXAMPLES / "tiny_transformer.py", batch_size=4)
    assert (cfg.batch_size, cfg.optimizer) == (4, "adamw")
    assert cfg.preset == str((EXAMPLES / "tiny_transformer.py").resolve())


def test_lstm_state_is_carried_and_counted_as_other():
    history, summary, cfg = run_file(EXAMPLES / "lstm_language_model.py", steps=3)
    assert summary.stopped_by == "completed"
    # (h, c): two float32 tensors of 1 x batch x hidden, carried after each forward.
    mod = plain_module(EXAMPLES / "lstm_language_model.py")
    state_bytes = sum(t.nbytes for t in mod.init_state(cfg.batch_size))
    assert np.all(samples_at(history, "forward", "other") == state_bytes)
    assert samples_at(history, "start", "other")[0] == 0


def test_lstm_file_without_detach_gives_the_explained_error_and_resumes_once_switched_on():
    cfg = file_config(EXAMPLES / "lstm_language_model.py", steps=6, detach_state=False)
    controls = RunControls(cfg.techniques, cfg.schedule)
    history = RunHistory()
    errored = threading.Event()

    class Sink:
        def __getattr__(self, name):
            return getattr(history, name)

        def on_event(self, event):
            history.on_event(event)
            if event.kind == "error":
                errored.set()

    result = {}
    worker = threading.Thread(target=lambda: result.update(
        summary=run_training(cfg, controls, Sink(), on_error="pause")))
    worker.start()
    assert errored.wait(120)
    (error,) = [e for e in history.events() if e.kind == "error"]
    assert error.step == 1 and error.phase == "backward"
    assert "backward through the graph a second time" in error.message
    assert "detach_state on" in error.explanation and "init_state" in error.explanation
    controls.set("detach_state", True)
    controls.resume()
    worker.join(120)
    assert not worker.is_alive()
    assert result["summary"].stopped_by == "completed"
    steps = history.steps.column("step")
    assert list(steps) == [0, 2, 3, 4, 5]  # step 1 failed; the rest trained
    assert len([e for e in history.events() if e.kind == "error"]) == 1


def test_amp_back_off_casts_the_carried_state_to_the_models_dtype():
    cfg = file_config(EXAMPLES / "lstm_language_model.py", steps=6)
    cfg = cfg.with_schedule([ScheduledChange.parse("2:amp=bf16"),
                             ScheduledChange.parse("4:amp=off")])
    history = RunHistory()
    summary = run_training(cfg, RunControls(cfg.techniques, cfg.schedule), history)
    assert summary.stopped_by == "completed", summary.error
    assert len(history.steps.column("step")) == 6


# --- the CLI ---------------------------------------------------------------------------------
def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_runs_an_example_by_path_and_names_the_folder_after_it(capsys, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "run", "--preset", str(EXAMPLES / "tiny_transformer.py"),
                         "--steps", "3", "--quiet")
    assert code == 0, err
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.endswith("-tiny_transformer")
    assert "steps: 3 (completed)" in out


def test_config_file_names_a_model_file_beside_it(capsys, tmp_path):
    model = tmp_path / "models" / "net.py"
    model.parent.mkdir()
    model.write_text((EXAMPLES / "cnn_classifier.py").read_text())
    toml = tmp_path / "models" / "run.toml"
    toml.write_text('preset = "net.py"\nsteps = 2\nbatch_size = 4\n')
    code, _out, err = cli(capsys, "run", "--config", str(toml), "--out", str(tmp_path / "r"),
                         "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "r" / "run.json").read_text())
    assert doc["config"]["preset"] == str(model.resolve())
    assert doc["config"]["batch_size"] == 4  # the config file's, over the model file's 16
    assert doc["config"]["eval_every"] == 5  # the model file's CONFIG


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_the_memory_check_estimates_each_example_from_shapes(name):
    from memlens.core.model_file_preflight import estimate_model_file_memory

    path = EXAMPLES / name
    cfg = file_config(path)
    estimate = estimate_model_file_memory(cfg)
    mod = plain_module(path)
    params = sum(p.nbytes for p in mod.build_model().parameters())
    assert estimate is not None
    assert estimate.params == estimate.grads == params
    assert estimate.optimizer == 2 * params  # adam / adamw: two moments
    assert estimate.activations > 0


def test_state_is_given_back_exactly_without_amp(tmp_path):
    # A float64 state beside float32 weights: memlens must not cast it (only autocast's
    # half-precision state is cast back, and only once AMP is off again).
    path = tmp_path / "float64_state.py"
    path.write_text('''\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, state):
        if state.dtype != torch.float64:
            raise TypeError(f"state came back as {state.dtype}")
        return self.fc(x) + state.float(), state * 0.5 + x.double().sum(1, keepdim=True)


def build_model():
    return Net()


def init_state(batch_size):
    return torch.zeros(batch_size, 1, dtype=torch.float64)


def make_batch(step, split):
    gen = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=gen), torch.randint(0, 3, (8,), generator=gen)
''')
    history, summary, _ = run_file(path, steps=4)
    assert summary.stopped_by == "completed", summary.error
    assert np.all(samples_at(history, "forward", "other") == 8 * 8)  # 8 float64 values
