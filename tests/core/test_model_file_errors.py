"""Bad model files: each gets a clear message (exit 2, or 3 for a training error) and no
traceback, names file:line where there is one, and leaves nothing half-written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import main
from memlens.core.model_file import CONTRACT

GOOD = '''\
import torch
from torch import nn


def build_model():
    return nn.Linear(4, 3)


def make_batch(step, split):
    gen = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=gen), torch.randint(0, 3, (8,), generator=gen)
'''


def write(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def run(capsys, tmp_path: Path, preset: str | Path, *extra: str) -> tuple[int, str]:
    out = tmp_path / "run"
    code = main.main(["run", "--preset", str(preset), "--steps", "3", "--quiet",
                      "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_good_file_runs(capsys, tmp_path):
    code, err = run(capsys, tmp_path, write(tmp_path, GOOD))
    assert code == 0, err


def test_missing_file_is_named_and_no_run_folder_is_made(capsys, tmp_path):
    code, err = run(capsys, tmp_path, tmp_path / "nowhere" / "model.py")
    assert code == 2
    assert "does not exist" in err and "nowhere/model.py" in err and "mlp" in err
    assert not (tmp_path / "run").exists()


def test_a_file_that_is_not_python_is_refused(capsys, tmp_path):
    code, err = run(capsys, tmp_path, write(tmp_path, GOOD, "model.txt"))
    assert code == 2
    assert "not a Python file (.py)" in err and "build_model" in err


def test_an_unknown_preset_name_lists_the_built_ins_and_model_files(capsys, tmp_path):
    code, err = run(capsys, tmp_path, "mpl")
    assert code == 2
    assert "transformer" in err and ".py model file" in err


def test_syntax_error_names_file_and_line(capsys, tmp_path):
    path = write(tmp_path, GOOD + "\ndef broken(:\n    pass\n")
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert f"{path}:{line_of(path, 'def broken(')}: syntax error" in err


def test_missing_required_function_is_named_with_the_contract(capsys, tmp_path):
    path = write(tmp_path, GOOD.replace("def make_batch", "def make_batches"))
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert "no function make_batch()" in err and CONTRACT in err


def test_build_model_not_returning_a_module(capsys, tmp_path):
    path = write(tmp_path, GOOD.replace("return nn.Linear(4, 3)", "return {'w': 1}"))
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert "build_model() returned dict, not a torch.nn.Module" in err


def test_make_batch_returning_the_wrong_type(capsys, tmp_path):
    path = write(tmp_path, GOOD.replace("return torch.randn(8, 4, generator=gen), ",
                                        "return torch.randn(8, 4, generator=gen); "))
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert "make_batch(0, 'train') returned a Tensor; it must return a pair" in err


def test_make_batch_returning_the_wrong_shape(capsys, tmp_path):
    path = write(tmp_path, GOOD.replace("(0, 3, (8,)", "(0, 3, (5,)"))
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert "inputs hold 8 samples but targets 5" in err


RAISING = GOOD.replace("def build_model():\n    return nn.Linear(4, 3)", '''\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if x.shape[0] > 0:
            raise ValueError("this model cannot take that batch")
        return self.fc(x)


def build_model():
    return Net()''')

NO_PAIR = GOOD.replace("def build_model():\n    return nn.Linear(4, 3)", '''\
class Net(nn.Linear):
    def forward(self, x, state):
        return super().forward(x) + state


def build_model():
    return Net(4, 3)


def init_state(batch_size):
    return torch.zeros(batch_size, 3)''')


def test_forward_raising_is_a_training_error_at_the_files_line(capsys, tmp_path):
    path = write(tmp_path, RAISING)
    code, err = run(capsys, tmp_path, path)
    assert code == 3
    line = line_of(path, "raise ValueError")
    assert "ValueError: this model cannot take that batch" in err
    assert f"model.py:{line}, in forward: raise ValueError" in err
    assert (tmp_path / "run" / "run.json").exists()  # the run's files are kept


def test_init_state_without_a_model_returning_a_pair(capsys, tmp_path):
    code, err = run(capsys, tmp_path, write(tmp_path, NO_PAIR))
    assert code == 2
    assert "model(inputs, state) must return (output, new_state)" in err
    assert "a tensor of shape (8, 3)" in err


def test_config_with_an_unknown_key_names_its_line(capsys, tmp_path):
    path = write(tmp_path, GOOD + "\nCONFIG = {'batch_size': 8, 'learning_rate': 0.1}\n")
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert f"{path}:{line_of(path, 'CONFIG')}: CONFIG key 'learning_rate' is not a setting" in err


def test_config_that_is_not_a_literal_is_refused_without_running_the_file(capsys, tmp_path):
    marker = tmp_path / "ran"
    path = write(tmp_path, GOOD + f"\nopen({str(marker)!r}, 'w').close()\n"
                 "CONFIG = dict(batch_size=8)\n")
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert "CONFIG must be a literal dict" in err
    assert not marker.exists()


@pytest.mark.parametrize("statement, words", [
    ("import no_such_module_for_memlens", "ModuleNotFoundError"),
    ("raise SystemExit(1)", "SystemExit"),
])
def test_an_error_while_loading_names_the_line_and_does_not_exit(capsys, tmp_path,
                                                                   statement, words):
    path = write(tmp_path, GOOD + f"\n{statement}\n")
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert f"{path}:{line_of(path, statement)}: loading the file raised {words}" in err


def test_graph_command_takes_a_model_file(capsys, tmp_path):
    out = tmp_path / "g.dot"
    code = main.main(["graph", "--preset", str(write(tmp_path, GOOD)), "--step", "1",
                      "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "AddmmBackward0" in out.read_text()


def test_a_model_too_large_for_the_machine_is_refused_with_the_estimate(capsys, tmp_path):
    # 200,000 x 200,000 float32 weights: 160 GB of parameters, and as much again for the
    # grads and twice for Adam. Built on the meta device for the estimate: nothing allocated.
    path = write(tmp_path, GOOD.replace("nn.Linear(4, 3)", "nn.Sequential(nn.Linear(4, 200_000), "
                                        "nn.Linear(200_000, 200_000), nn.Linear(200_000, 3))"))
    code, err = run(capsys, tmp_path, path)
    assert code == 2
    assert "the run needs about" in err and "params 149" in err and "force=true" in err
    assert not (tmp_path / "run").exists()


COUNTED = '''\
import pathlib
import torch
from torch import nn

with open(pathlib.Path(__file__).with_name("loads.txt"), "a") as fh:
    fh.write("loaded\\n")  # a side effect at import, as a file that downloads data has


def build_model():
    return nn.Linear(4, 3)


def make_batch(step, split):
    gen = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=gen), torch.randint(0, 3, (8,), generator=gen)
'''


@pytest.mark.parametrize("extra", [(), ("--set", "amp=bf16")], ids=["fp32", "bf16 checked"])
def test_a_model_file_runs_once_per_run_its_preflight_included(capsys, tmp_path, extra):
    """`main.py run` checks the run fits (and, for bf16 on a CPU, its layers) before the
    run builds the model: the file's top-level code runs once for all of it."""
    path = write(tmp_path, COUNTED)
    code, _ = run(capsys, tmp_path, path, *extra)
    assert code == 0
    assert (tmp_path / "loads.txt").read_text().splitlines() == ["loaded"]
    (tmp_path / "again").mkdir()
    code, _ = run(capsys, tmp_path / "again", path, *extra)
    assert code == 0  # a second run runs it again: once more, not twice more
    assert (tmp_path / "loads.txt").read_text().splitlines() == ["loaded"] * 2
