"""Bad input is exit 2 and one short line naming what is wrong, never a traceback, a killed
process or a file left behind: a model too big for memory, a model file or preset path that
cannot be used, a settings file nested past Python's limit, an --out that cannot be a file
or a folder, inputs refused like their siblings, a user's long exception cut short."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.cli_child import TINY, TRAIN_SCRIPT, cli, model_file, refused_in_one_line


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


@pytest.mark.parametrize("args,command", [
    (["graph", "--set", "width=65536", "--out", "{out}/g.dot"], "graph"),
    (["lessons", "--lesson", "zero_grad", "--steps", "2", "--set", "width=65536",
      "--out", "{out}/report"], "lessons"),
])
def test_a_model_too_big_for_memory_is_refused_before_it_is_built(tmp_path, args, command):
    code, _, err = cli(*[a.format(out=tmp_path) for a in args])
    line = refused_in_one_line(code, err, command)
    assert "needs about" in line and "is available" in line and "force=true" in line
    assert list(tmp_path.iterdir()) == []  # nothing made: no folder, no report


def _config_unhashable(tmp_path):
    return model_file(tmp_path, "CONFIG = {[1]: 2}\n")


def _config_long_expression(tmp_path):
    return model_file(tmp_path, "CONFIG = {'lr': " + "+".join(["1"] * 50_000) + "}\n")


def _str_raises(tmp_path):
    return model_file(tmp_path, build="""    class Odd(Exception):
        def __str__(self):
            raise RuntimeError("no text")
    raise Odd()""")


def _no_such_user(tmp_path):
    return "~memlens-no-such-user/model.py"


def _link_loop(tmp_path):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    return tmp_path / "a.py"


@pytest.mark.parametrize("make", [_config_unhashable, _config_long_expression, _str_raises,
                                  _no_such_user, _link_loop])
def test_a_model_file_or_preset_path_that_cannot_be_used_is_one_line(tmp_path, make):
    preset = make(tmp_path)
    line = refused_in_one_line(*cli("run", "--preset", preset, "--steps", "1", "--quiet",
                                    "--out", tmp_path / "r")[::2], "run")
    assert len(line) < 1000


def test_a_toml_nested_fifty_thousand_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 50_000 + "]" * 50_000 + "\n")
    line = refused_in_one_line(*cli("run", "--config", path, "--steps", "1", "--quiet",
                                    "--out", tmp_path / "r")[::2], "run")
    assert "deep.toml" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_shot_out_onto_a_folder_or_under_a_file_leaves_no_temporary(tmp_path, where):
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "adir").mkdir()
    out = tmp_path / ("adir" if where == "folder" else "afile/x.png")
    refused_in_one_line(*cli("shot", "--steps", "1", "--out", out)[::2], "shot")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["adir", "afile"]
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("out", ["afile", "afile/sub"])
def test_lessons_out_that_cannot_be_a_folder_is_refused_before_measuring(tmp_path, out):
    (tmp_path / "afile").write_text("mine")
    code, stdout, err = cli("lessons", "--lesson", "zero_grad", "--steps", "2", *TINY[:3],
                            "--out", tmp_path / out)
    line = refused_in_one_line(code, err, "lessons")
    assert err.strip().splitlines() == [line] and stdout == ""  # nothing was measured
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("args,command,says", [
    (["run", "--preset", "", "--steps", "1"], "run", "preset: ''"),
    (["graph", "--preset", "", "--out", "{out}/g.dot"], "graph", "preset: ''"),
    (["lessons", "--preset", "", "--steps", "2", "--out", "{out}/l"], "lessons", "preset: ''"),
    (["watch", "{script}", "--out", "", "--", "1"], "watch", "--out ''"),
    (["watch", "{script}", "--capture-every", str(2**64), "--out", "{out}/w", "--", "1"],
     "watch", "--capture-every"),
    (["app", "--follow", "{script}"], "app", "--follow"),
])
def test_unclear_inputs_are_refused_like_their_siblings(tmp_path, script, args, command, says):
    work = tmp_path / "work"
    work.mkdir()
    code, _, err = cli(*[a.format(out=work, script=script) for a in args], cwd=tmp_path)
    line = refused_in_one_line(code, err, command)
    assert says in line
    assert list(work.iterdir()) == [] and not (tmp_path / "runs").exists()


def test_a_model_files_long_exception_is_cut_to_its_first_lines(tmp_path):
    body = "\\n".join(f"line {i} " + "x" * 200 for i in range(100))
    preset = model_file(tmp_path, build=f'    raise ValueError("{body}")')
    line = refused_in_one_line(*cli("run", "--preset", preset, "--steps", "1", "--quiet",
                                    "--out", tmp_path / "r")[::2], "run")
    assert f"{preset}:5" in line and "ValueError" in line and "line 0" in line
    assert "line 99" not in line and len(line) < 1500
