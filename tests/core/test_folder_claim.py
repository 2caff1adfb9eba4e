"""Claiming a folder, for every producer: a folder holding a run or a report is never written
again, and --force deletes only the files memlens wrote there (as the folder's own run.json
or lessons.json lists them), never another run's folder, a file it does not know or what a
link points at, and says what it deleted."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

import main
from tests.core.cli_child import (
    ROOT,
    TINY,
    TRAIN_SCRIPT,
    cli,
    refused_in_one_line,
    snapshot_of,
    write_good_run,
)

LESSON = ["lessons", "--lesson", "zero_grad", "--steps", "2", *TINY[:3], "--quiet"]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    return write_good_run(tmp_path_factory.mktemp("good") / "run")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A lessons report as `lessons --out` writes it (one lesson, two arms)."""
    out = tmp_path_factory.mktemp("report") / "rep"
    assert main.main([*LESSON, "--out", str(out)]) == 0
    return out


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


def lessons(capsys, *args) -> tuple[int, str]:
    code = main.main([*LESSON, *map(str, args)])
    return code, capsys.readouterr().err


# --- a used folder is refused ------------------------------------------------------------------


def test_watch_out_over_a_finished_run_is_refused_and_leaves_it_whole(tmp_path, script):
    out = tmp_path / "w"
    code, _, err = cli("watch", script, "--out", out, "--", "2")
    assert code == 0, err
    before = snapshot_of(out)
    assert {"steps.csv", "memory.csv", "run.json"} <= set(before)
    line = refused_in_one_line(*cli("watch", script, "--out", out, "--", "3")[::2], "watch")
    assert "already holds a run" in line and "--force" in line
    assert snapshot_of(out) == before


def test_lessons_out_a_run_folder_is_refused_as_its_help_says(tmp_path, good_run, capsys):
    folder = tmp_path / "run"
    shutil.copytree(good_run, folder)
    before = snapshot_of(folder)
    for force in ([], ["--force"]):
        code, err = lessons(capsys, "--out", folder, *force)
        assert code == 2 and "holds a run's files" in err, err
        assert snapshot_of(folder) == before


def test_a_folder_of_other_runs_is_not_called_a_lessons_report(tmp_path, good_run, capsys):
    out = tmp_path / "project"
    shutil.copytree(good_run, out / "runs" / "20250101-120000-mlp")  # `run` without --out
    code, err = lessons(capsys, "--out", out)
    assert code == 2
    assert "already holds a lessons report" not in err
    assert "runs" in err and "lessons.json" in err  # what is there, and what is missing


def test_lessons_out_into_an_interrupted_reports_folder_keeps_its_runs(tmp_path, good_run,
                                                                        capsys):
    out = tmp_path / "report"
    for arm in ("mlp-zero_grad-off", "mlp-zero_grad-on"):  # killed before lessons.json
        shutil.copytree(good_run, out / "runs" / arm)
    before = snapshot_of(out)
    for force in ([], ["--force"]):  # no report lists them: nothing is memlens's to delete
        code, err = lessons(capsys, "--out", out, *force)
        assert code == 2 and "nothing was deleted" in err, err
        assert snapshot_of(out) == before


# --- what --force deletes ----------------------------------------------------------------------


def test_lessons_force_in_a_project_folder_deletes_nothing_it_did_not_write(tmp_path, good_run,
                                                                            capsys):
    project = tmp_path / "myproject"
    (project / "charts").mkdir(parents=True)
    (project / "charts" / "my_paper_figure.png").write_bytes(b"\x89PNG the user's own")
    for name in ("20250101-120000-mlp", "20250102-090000-cnn"):  # two earlier runs
        shutil.copytree(good_run, project / "runs" / name)
    before = snapshot_of(project)
    code, err = lessons(capsys, "--out", project, "--force")
    assert code == 2, err
    assert snapshot_of(project) == before


def test_force_over_a_report_deletes_what_it_lists_and_nothing_else(tmp_path, report, capsys):
    out = tmp_path / "rep"
    shutil.copytree(report, out)
    listed = json.loads((out / "lessons.json").read_text())
    (out / "charts" / "mine.png").write_bytes(b"the user's")
    before = snapshot_of(out)
    code, err = lessons(capsys, "--out", out, "--force")
    assert code == 2 and "charts/mine.png" in err and "nothing was deleted" in err, err
    assert snapshot_of(out) == before

    (out / "charts" / "mine.png").unlink()
    code, err = lessons(capsys, "--out", out, "--force")
    assert code == 0, err
    said = [line for line in err.splitlines() if "--force deleted" in line]
    files = [f for f in before if f != "charts/mine.png"]  # the report's and its arms'
    assert len(listed["run_folders"]) == 2 and set(listed["files"]) <= set(files)
    assert len(said) == 1 and f"the {len(files)} files" in said[0]
    steps = f"{listed['run_folders'][0]}/steps.csv"  # a new run's rows, times of its own
    assert (out / steps).read_bytes() != before[steps]
    assert json.loads((out / "lessons.json").read_text())["files"] == listed["files"]


def test_run_force_deletes_no_file_memlens_did_not_write(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "steps.csv").write_text("my own steps\n")
    (out / "run.json").write_text('{"my": "own"}')
    before = snapshot_of(out)
    code = main.main(["run", "--steps", "1", *TINY, "--quiet", "--out", str(out), "--force"])
    err = capsys.readouterr().err
    assert code == 2 and "not a run memlens wrote" in err, err
    assert snapshot_of(out) == before


def test_run_force_says_what_it_deleted(tmp_path, good_run, capsys):
    out = tmp_path / "r"
    shutil.copytree(good_run, out)
    (out / "notes.txt").write_text("mine, beside the run")
    code = main.main(["run", "--steps", "1", *TINY, "--quiet", "--out", str(out), "--force"])
    err = capsys.readouterr().err
    assert code == 0, err
    said = [line for line in err.splitlines() if "--force deleted" in line]
    assert len(said) == 1 and "3 files" in said[0] and "run.json" in said[0]
    assert (out / "notes.txt").read_text() == "mine, beside the run"


@pytest.mark.parametrize("command", ["run", "watch"])
def test_a_planted_steps_csv_link_is_never_followed(tmp_path, script, command):
    target = tmp_path / "precious.txt"
    target.write_text("the user's own file\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.csv").symlink_to(target)
    args = (["run", "--steps", "2", *TINY, "--quiet"] if command == "run"
            else ["watch", script])
    tail = [] if command == "run" else ["--", "2"]
    line = refused_in_one_line(*cli(*args, "--out", out, *tail)[::2], command)
    assert "steps.csv" in line
    assert target.read_text() == "the user's own file\n" and (out / "steps.csv").is_symlink()
    # a link memlens did not write (no run.json of memlens's beside it) is not deleted either
    refused_in_one_line(*cli(*args, "--force", "--out", out, *tail)[::2], command)
    assert target.read_text() == "the user's own file\n" and (out / "steps.csv").is_symlink()


def test_a_link_in_a_run_folder_goes_not_its_target(tmp_path, good_run, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("the user's own file\n")
    out = tmp_path / "r"
    shutil.copytree(good_run, out)
    (out / "trace.json").symlink_to(target)  # a run file's name, in a run memlens wrote
    code = main.main(["run", "--steps", "2", *TINY, "--quiet", "--out", str(out), "--force"])
    assert code == 0, capsys.readouterr().err
    assert target.read_text() == "the user's own file\n"
    assert not (out / "trace.json").exists()
    assert len((out / "steps.csv").read_text().splitlines()) == 1 + 2


# --- one claim for every producer ------------------------------------------------------------

CLAIMING = ("new_run_folder", "claim_folder", "claim_out_folder")
CLAIM_MODULES = {"memlens/core/runfolder/claim.py", "memlens/core/recorder/output.py"}


def test_every_producer_claims_its_folder_through_choose_folder():
    """Only the claim module and choose_folder name the claiming functions: the run, the
    watch, the app's run session, the lessons CLI and runner and the Lessons tab all go
    through choose_folder (the one policy), none claims a folder its own way."""
    found = []
    for path in sorted((ROOT / "memlens").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in CLAIM_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = (node.id if isinstance(node, ast.Name) else node.attr
                    if isinstance(node, ast.Attribute) else
                    next((a.name for a in node.names if a.name in CLAIMING), None)
                    if isinstance(node, ast.ImportFrom) else None)
            if name in CLAIMING:
                found.append(f"{rel}:{node.lineno} {name}")
    assert found == []
