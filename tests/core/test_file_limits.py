"""Every file memlens reads goes through one size-checked reader (core/safe_read.py): a FIFO,
/dev/zero, a folder or a link to a device where a file belongs is one line naming the path
and what it is (never a read that blocks or fills memory, never "does not exist" or "a
folder"); a file over its kind's limit is refused before it is read; JSON's whole numbers
and texts are bounded as it is parsed (5,000 digits, a lone surrogate), so export, ranks,
the follower and the Runs list never raise."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import main
from memlens.core.runfolder.format import MAX_JSON_TEXT, RunFolderError
from memlens.core.runfolder.reader import load_run
from tests.core.cli_child import (
    TINY,
    TRAIN_SCRIPT,
    cli,
    model_file,
    refused_in_one_line,
    write_good_run,
)

BIG_INT = "9" * 5000


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    return write_good_run(tmp_path_factory.mktemp("good") / "run")


def copy_run(good_run: Path, folder: Path) -> Path:
    shutil.copytree(good_run, folder)
    return folder


def edit_run_json(folder: Path, edit) -> None:
    """run.json's text after `edit(text)` (raw text: JSON's own escapes and digits)."""
    path = folder / "run.json"
    path.write_text(edit(path.read_text()))


# --- not a regular file: one line naming it, and nothing read ----------------------------------


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _run_with(kind, good_run: Path, tmp_path: Path, name: str) -> Path:
    folder = copy_run(good_run, tmp_path / "run")
    (folder / name).unlink()
    kind(folder / name)
    return folder


CASES = {  # what the command is given -> (its arguments, the command, what the line says)
    "settings FIFO": (lambda t, g: ["run", "--config", _fifo(t / "s.toml")], "named pipe"),
    "settings /dev/zero": (lambda t, g: ["run", "--config", "/dev/zero"], "character device"),
    "model file FIFO": (lambda t, g: ["run", "--preset", _fifo(t / "m.py")], "named pipe"),
    "script FIFO": (lambda t, g: ["watch", _fifo(t / "train.py")], "named pipe"),
    "snapshot link to /dev/zero": (
        lambda t, g: ["shot", "--open", _zero_link(t / "snapshot.pickle"), "--out",
                      t / "s.png"], "link to /dev/zero"),
    "steps.csv FIFO": (lambda t, g: ["export", _run_with(_fifo, g, t, "steps.csv")],
                       "named pipe"),
    "run.json link to /dev/zero": (
        lambda t, g: ["export", _run_with(_zero_link, g, t, "run.json")], "link to /dev/zero"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_fifo_or_device_where_a_file_belongs_is_one_line_naming_it(tmp_path, good_run, case):
    make, says = CASES[case]
    args = make(tmp_path, good_run)
    # a FIFO opened for reading waits for a writer, /dev/zero never ends: the child's
    # timeout is the hang guard
    line = refused_in_one_line(*cli(*args, timeout=120)[::2], args[0])
    assert says in line and "does not exist" not in line


@pytest.mark.parametrize("kind", ["folder", "link to /dev/zero"])
def test_what_stands_where_allocations_npy_belongs_is_named(tmp_path, good_run, kind):
    folder = copy_run(good_run, tmp_path / "run")
    if kind == "folder":
        (folder / "allocations.npy").mkdir()
    else:
        _zero_link(folder / "allocations.npy")
    with pytest.raises(RunFolderError, match=r"allocations\.npy: is a ") as info:
        load_run(folder)
    assert kind in str(info.value)


def test_a_settings_file_over_its_limit_is_refused_unread(tmp_path, capsys):
    from memlens.core.safe_read import MAX_SETTINGS

    path = tmp_path / "big.toml"
    path.write_text("batch_size = 32\n" + "# padding\n" * (MAX_SETTINGS // 10 + 1))
    assert main.main(["run", "--config", str(path), "--steps", "1", "--quiet",
                      "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "big.toml" in err and "more than the 1.00 MiB" in err
    assert not (tmp_path / "r").exists()


def test_a_settings_value_is_never_echoed_whole(tmp_path, capsys):
    path = tmp_path / "long.toml"
    path.write_text('batch_size = "' + "x" * 900_000 + '"\n')
    assert main.main(["run", "--config", str(path), "--steps", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "batch_size" in err and "more characters" in err and len(err) < 1000


def test_a_folder_memlens_may_not_read_is_one_line(tmp_path, good_run, capsys, monkeypatch):
    job = tmp_path / "job"
    folder = copy_run(good_run, job / "rank0")
    if os.geteuid() == 0:  # root reads a folder of mode 000: refuse as the kernel would
        inside = str(folder) + os.sep
        real_stat, real_open, real_access = os.stat, os.open, os.access

        def denied(path) -> OSError:
            return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

        def stat(path, *a, **k):
            if str(path).startswith(inside):
                raise denied(path)
            return real_stat(path, *a, **k)

        def open_(path, *a, **k):
            if str(path).startswith(inside):
                raise denied(path)
            return real_open(path, *a, **k)

        monkeypatch.setattr(os, "stat", stat)
        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "access", lambda p, m, *a, **k: str(p) != str(folder)
                            and real_access(p, m, *a, **k))
    else:
        folder.chmod(0)
    try:
        for args in (["export", str(folder)], ["ranks", str(job)]):
            assert main.main(args) == 2
            err = capsys.readouterr().err
            assert "permission denied" in err.lower() and "Traceback" not in err
    finally:
        folder.chmod(0o755)


# --- whole numbers and texts bounded as JSON is parsed -----------------------------------------


def test_a_5000_digit_number_in_run_json_is_one_line_in_export_and_ranks(tmp_path, good_run,
                                                                         capsys):
    folder = copy_run(good_run, tmp_path / "job" / "rank0")
    edit_run_json(folder, lambda t: t.replace('"format"', f'"pid": {BIG_INT}, "format"', 1))
    for args in (["export", str(folder)], ["ranks", str(folder.parent)]):
        assert main.main(args) == 2
        err = capsys.readouterr().err
        assert "run.json" in err and "5,000 digits" in err and len(err) < 600


def test_a_5000_digit_number_in_the_allocation_frames_names_the_line(tmp_path):
    from memlens.core.runfolder.history_files import write_history
    from tests.core.helpers import run

    history, _ = run("mlp", steps=2, precise=True)
    folder = tmp_path / "precise"
    write_history(history, folder)
    assert (folder / "allocations.npy").is_file()
    lines = (folder / "allocation_frames.jsonl").read_text().splitlines()
    lines[0] = BIG_INT
    (folder / "allocation_frames.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFolderError, match=r"allocation_frames\.jsonl: line 1 .*5,000 digits"):
        load_run(folder)


def test_the_follower_refuses_a_5000_digit_number_in_one_line(tmp_path, good_run):
    from memlens.core.runfolder.follow import RunFollower

    folder = copy_run(good_run, tmp_path / "run")
    edit_run_json(folder, lambda t: t.replace('"format"', f'"pid": {BIG_INT}, "format"', 1))
    with pytest.raises(RunFolderError, match="5,000 digits"):
        RunFollower(folder).poll()


def test_a_lone_surrogate_reads_as_text_that_prints(tmp_path, good_run):
    folder = copy_run(good_run, tmp_path / "job" / "rank0")
    edit_run_json(folder, lambda t: re.sub(r'"host": "[^"]*"', '"host": "a\\\\ud800b"', t, count=1))
    history = load_run(folder)
    assert history.meta["host"] == "a\ufffdb"
    json.dumps(history.meta, ensure_ascii=False).encode("utf-8")  # every text encodes
    for args in (["ranks", folder.parent], ["export", folder, "--out", tmp_path / "x"]):
        code, out, err = cli(*args, timeout=120)  # a terminal's UTF-8, as a user's
        assert code == 0 and "Traceback" not in err, err[-2000:]
        assert args[0] != "ranks" or "a\ufffdb" in out


# --- long strings cut on load --------------------------------------------------------------


def _texts(history) -> list[str]:
    texts, stack = [], [history.meta]
    while stack:
        node = stack.pop()
        for v in (node.values() if isinstance(node, dict) else node):
            if isinstance(v, str):
                texts.append(v)
            elif isinstance(v, dict | list):
                stack.append(v)
    return texts + [e.message for e in history.events()]


def test_a_fifty_megabyte_string_in_run_json_is_cut_on_load(tmp_path, good_run):
    folder = copy_run(good_run, tmp_path / "long")
    doc = json.loads((folder / "run.json").read_text())
    huge = "x" * 50_000_000
    doc["environment"]["memory_label"] = huge
    doc["events"].append({"step": 1, "time_s": 0.1, "kind": "error", "message": huge})
    doc["notes"] = [[{"deep": huge}]]
    (folder / "run.json").write_text(json.dumps(doc))
    history = load_run(folder)
    assert max(map(len, _texts(history))) == MAX_JSON_TEXT + 1  # cut, marked with "…"
    assert history.meta["environment"]["memory_label"] == "x" * MAX_JSON_TEXT + "…"
    assert history.meta["environment"]["device"] == doc["environment"]["device"]


def test_shot_open_with_a_fifty_megabyte_string_saves_its_picture(tmp_path, good_run):
    folder = copy_run(good_run, tmp_path / "long")
    doc = json.loads((folder / "run.json").read_text())
    doc["events"].append({"step": 1, "time_s": 0.1, "kind": "error", "key": "x" * 50_000_000,
                          "message": "y" * 50_000_000})
    (folder / "run.json").write_text(json.dumps(doc))
    code, _, err = cli("shot", "--open", folder, "--out", tmp_path / "s.png")
    assert code == 0, err[-2000:]
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- values of the wrong type or shape -------------------------------------------------------


def _config_preset_number(doc):
    doc["config"]["preset"] = 5


def _environment_lists(doc):
    doc["environment"] = {k: [1] for k in doc["environment"]}


def _environment_label_number(doc):
    doc["environment"]["memory_label"] = 7


@pytest.mark.parametrize("damage,named", [
    (_config_preset_number, "config.preset"), (_environment_lists, "environment."),
    (_environment_label_number, "environment.memory_label"),
])
@pytest.mark.parametrize("command", ["shot", "app"])
def test_run_json_values_of_the_wrong_type_are_one_line(tmp_path, good_run, damage, named,
                                                        command):
    folder = copy_run(good_run, tmp_path / "typed")
    doc = json.loads((folder / "run.json").read_text())
    damage(doc)
    (folder / "run.json").write_text(json.dumps(doc))
    out = ["--out", tmp_path / "s.png"] if command == "shot" else []
    # app --open shows the window once the folder reads: a bounded wait if it wrongly does
    line = refused_in_one_line(*cli(command, "--open", folder, *out, timeout=60)[::2],
                               command)
    assert "run.json" in line and named in line


def test_a_garbage_allocations_header_is_one_line(tmp_path, good_run):
    folder = copy_run(good_run, tmp_path / "npy")
    head = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little")
    (folder / "allocations.npy").write_bytes(head + b"{'descr': '''" + b" " * 100 + b"\n")
    (folder / "frames.jsonl").write_text('"x"\n')
    line = refused_in_one_line(*cli("shot", "--open", folder, "--out", tmp_path / "s.png")[::2],
                               "shot")
    assert "allocations.npy" in line


def test_a_model_file_that_is_a_folder_is_named_a_folder(tmp_path, capsys):
    (tmp_path / "m.py").mkdir()
    assert main.main(["run", "--preset", str(tmp_path / "m.py"), "--steps", "1", *TINY,
                      "--quiet"]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_a_watched_script_over_its_limit_is_refused_unread(tmp_path, capsys, monkeypatch):
    import memlens.core.safe_read as safe_read

    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    monkeypatch.setattr(safe_read, "MAX_SOURCE", 100)
    assert main.main(["watch", str(script)]) == 2
    assert "more than the 100 B" in capsys.readouterr().err


def test_a_model_file_over_its_limit_is_refused_unread(tmp_path, capsys, monkeypatch):
    import memlens.core.model_file as model_file_module

    monkeypatch.setattr(model_file_module, "MAX_SOURCE", 100)
    preset = model_file(tmp_path)
    assert main.main(["run", "--preset", str(preset), "--steps", "1", "--quiet"]) == 2
    assert "more than the 100 B" in capsys.readouterr().err
