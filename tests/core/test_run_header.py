"""One run.json header for every producer: the lab's `run`, a watched script and the app's
runs write the same keys, and a reader tells a run whose process was killed (no summary,
its pid gone) from a live one: the follower, the runs list and the Runs dock say so."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import main
from memlens.core.runfolder.follow import GONE, LIVE, RunFollower
from memlens.core.runfolder.listing import list_run
from memlens.core.watch.script import run_script

ROOT = Path(__file__).resolve().parents[2]
HEADER_KEYS = {"source", "pid", "host", "rank", "world_size", "node_rank", "local_rank",
               "started", "argv", "script", "config", "finished", "environment"}
SCRIPT = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
"""


def test_a_lab_run_and_a_watched_script_write_the_same_header(tmp_path, capsys):
    assert main.main(["run", "--preset", "mlp", "--steps", "2", "--quiet",
                      "--set", "batch_size=8", "width=16", "--out", str(tmp_path / "lab")]) == 0
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert run_script(str(script), [], out=tmp_path / "watch", quiet=True) == 0
    capsys.readouterr()
    lab = json.loads((tmp_path / "lab" / "run.json").read_text())
    watched = json.loads((tmp_path / "watch" / "run.json").read_text())
    assert set(lab) >= HEADER_KEYS and set(watched) >= HEADER_KEYS
    assert set(lab["environment"]) == set(watched["environment"])
    for doc, source in ((lab, "lab"), (watched, "watch")):
        assert doc["source"] == source and doc["pid"] == os.getpid()
        assert doc["host"] == socket.gethostname() and doc["finished"] is True
        assert (doc["rank"], doc["world_size"]) == (0, 1)
    assert lab["config"]["preset"] == "mlp" and lab["script"] is None
    assert watched["script"] == str(script) and watched["config"] is None


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no SIGKILL here")
def test_a_killed_run_is_shown_as_ended_not_live(tmp_path):
    """`main.py run` killed with SIGKILL mid-run: no summary; its pid no longer runs, so the
    follower says the writer is gone and the runs list marks it ended."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "memlens", "run", "--preset", "mlp", "--steps", "1000000",
         "--out", str(out)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env=env, cwd=ROOT)
    try:
        first = child.stderr.readline()  # printed once the folder and its header exist
        assert str(out) in first
        follower = RunFollower(out)
        follower.poll()
        assert follower.state == LIVE and list_run(out).state == LIVE
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stderr.close()
    follower.poll()
    assert follower.state == GONE
    assert list_run(out).state == GONE and not list_run(out).finished
