"""Nothing hangs: a watched script whose os.fork() child trains (the child leaves the
parent's recording alone and dies on SIGTERM as unwatched; the parent finishes its folder),
and a model file that starts a thread that never ends (the run ends its own process when its
work is done, naming the thread). Each child's `timeout=` is the hang guard."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.core.cli_child import ROOT, child_env, model_file

FORKING_SCRIPT = """
import os, signal, sys, time
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
def train(n):
    for step in range(n):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
pid = os.fork()
if pid == 0:  # the child trains, then is stopped as a job runner stops a worker
    train(3)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print("child:", "SIGTERM" if os.WIFSIGNALED(status) and os.WTERMSIG(status) ==
      signal.SIGTERM else f"exit {os.waitstatus_to_exitcode(status)}", flush=True)
train(2)
"""


def test_a_forked_child_that_trains_leaves_the_parents_recording_whole(tmp_path):
    script = tmp_path / "forking.py"
    script.write_text(FORKING_SCRIPT)
    out = tmp_path / "w"
    proc = subprocess.run([sys.executable, str(ROOT / "main.py"), "watch", str(script),
                           "--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "child: SIGTERM" in proc.stdout  # it died of it, as it would unwatched
    recorded = [line for line in proc.stderr.splitlines() if "recorded in" in line]
    assert recorded == [f"memlens watch: 2 steps recorded in {out}"]  # the parent's alone
    doc = json.loads((out / "run.json").read_text())
    rows = (out / "steps.csv").read_text().splitlines()[1:]
    assert doc["finished"] is True and doc["summary"]["steps_done"] == len(rows) == 2
    assert (out / "memory.csv").is_file()


def test_a_thread_the_model_file_leaves_running_does_not_keep_the_run_alive(tmp_path):
    head = ("import threading, time\n"
            "def _poll():\n"
            "    while True:\n"
            "        time.sleep(0.05)\n"
            "threading.Thread(target=_poll, name='my-poller').start()\n")
    preset = model_file(tmp_path, head)
    proc = subprocess.run([sys.executable, str(ROOT / "main.py"), "run", "--preset",
                           str(preset), "--steps", "2", "--quiet", "--out", str(tmp_path / "r")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "still run" in line]
    assert len(lines) == 1 and "my-poller" in lines[0]
    assert json.loads((tmp_path / "r" / "run.json").read_text())["summary"]["steps_done"] == 2
