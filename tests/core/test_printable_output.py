"""What the commands print of a file's text (a rank's host, a folder's name, a refusal that
quotes a path) is printable: a terminal's escape sequences are shown as escapes, never acted
on (one cleared the screen)."""

from __future__ import annotations

import json
import shutil

import main
from tests.core.cli_child import write_good_run

CLEAR_SCREEN = "\x1b[2J\x1b]0;owned\x07"


def test_ranks_prints_a_hosts_escape_sequences_as_text(tmp_path, capsys):
    folder = write_good_run(tmp_path / "job" / "rank0")
    doc = json.loads((folder / "run.json").read_text())
    doc["host"] = f"node{CLEAR_SCREEN}1"
    (folder / "run.json").write_text(json.dumps(doc))
    shutil.copytree(folder, tmp_path / "job" / "rank1")
    assert main.main(["ranks", str(tmp_path / "job")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert out.count("node\\x1b[2J\\x1b]0;owned\\x071") == 2  # each rank's host, as text


def test_a_refusal_quoting_a_path_prints_its_escapes_as_text(tmp_path, capsys):
    folder = write_good_run(tmp_path / f"run{CLEAR_SCREEN}")
    (folder / "run.json").write_text("{not json")  # its line names run.json's path
    assert main.main(["export", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err and len(err.splitlines()) == 1
