"""Each command's exit status says what happened: 2 for input to change (an --out PNG that
cannot be written, a model file whose build_model returns no model or whose forward raises),
and a rank folder numbered past any job's is no rank, not an OverflowError."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.core.cli_child import cli, model_file, refused_in_one_line, write_good_run

RAISING_FORWARD = """
from torch import nn
class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        if not x.is_meta:  # the memory estimate runs on the meta device
            raise ValueError("my forward is broken")
        return self.fc(x)
"""


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    return write_good_run(tmp_path_factory.mktemp("good") / "run")


def test_shot_to_a_png_that_cannot_be_written_exits_2(tmp_path, good_run):
    for args in (["--steps", "1"], ["--open", good_run]):
        line = refused_in_one_line(*cli("shot", *args, "--out", "/proc/memlens/x.png")[::2],
                                   "shot")
        assert "/proc/memlens/x.png" in line


def test_shot_of_a_model_file_whose_build_model_returns_an_int_exits_2(tmp_path):
    preset = model_file(tmp_path, build="    return 3")
    code, _, err = cli("shot", "--preset", preset, "--steps", "2", "--out", tmp_path / "s.png")
    line = refused_in_one_line(code, err, "shot")
    assert "build_model() returned int" in line


def test_graph_of_a_model_file_whose_forward_raises_exits_2(tmp_path):
    preset = model_file(tmp_path, RAISING_FORWARD, build="    return Broken()")
    code, _, err = cli("graph", "--preset", preset, "--out", tmp_path / "g.dot")
    line = refused_in_one_line(code, err, "graph")
    assert "my forward is broken" in line and "step 0" in line
    assert not (tmp_path / "g.dot").exists()


def test_a_rank_folder_numbered_past_any_job_is_not_a_rank(tmp_path, good_run):
    job = tmp_path / "job"
    shutil.copytree(good_run, job / "rank0")
    shutil.copytree(good_run, job / f"rank{'9' * 20}")
    code, _, err = cli("shot", "--open", job, "--out", tmp_path / "s.png")
    assert code == 0 and "Error" not in err, err[-2000:]
    code, out, err = cli("ranks", job)
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["0"]
