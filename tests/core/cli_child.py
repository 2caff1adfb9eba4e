"""The commands run as a user runs them, in a child process: its exit code, its one line, a
memory bound and a hang guard (`timeout=`, never a duration assert). Shared by the tests of
refusals, read limits, folder claims, signals and hangs."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from memlens.core.runfolder.history_files import write_history
from tests.core.helpers import run

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "batch_size=16", "width=32", "eval_every=0"]
MEMORY_LIMIT = 4 << 30  # address space a child may take: a case that allocates without bound
# fails with MemoryError here instead of growing until the kernel kills it
HANG_GUARD_S = 300  # only keeps a broken build from hanging the suite; no test waits on it


def limit_memory(limit: int = MEMORY_LIMIT) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def child_env(extra: dict | None = None) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "QT_QPA_PLATFORM": "offscreen",
            "PYTHONPATH": str(ROOT), **(extra or {})}


def cli(*args, cwd: Path = ROOT, timeout: float = HANG_GUARD_S, env: dict | None = None):
    """main.py in a child under MEMORY_LIMIT: (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *map(str, args)], cwd=cwd,
        capture_output=True, text=True, timeout=timeout, preexec_fn=limit_memory,
        env=child_env(env))
    return proc.returncode, proc.stdout, proc.stderr


def refused_in_one_line(code: int, err: str, command: str) -> str:
    """The one refusal line of `command`, after checking the exit code and no traceback."""
    assert code == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith(f"memlens {command}:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def snapshot_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links as their target's path), for a before/after compare."""
    out = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_symlink():
            out[key] = os.readlink(p).encode()
        elif p.is_file():
            out[key] = p.read_bytes()
    return out


def write_good_run(folder: Path, steps: int = 3) -> Path:
    """A small finished run folder, as `run` writes it."""
    history, _summary = run("mlp", steps=steps)
    write_history(history, folder)
    return folder


TRAIN_SCRIPT = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(int(sys.argv[1])):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""

MODEL_BASE = """
import torch
from torch import nn
def build_model():
    return nn.Linear(4, 2)
def make_batch(step, split):
    return torch.randn(8, 4), torch.randint(0, 2, (8,))
"""


def model_file(folder: Path, head: str = "", build: str = "", name: str = "model.py") -> Path:
    """A small model file: MODEL_BASE with `head` before it and build_model's body
    replaced by `build` where given."""
    source = head + MODEL_BASE
    if build:
        source = source.replace("    return nn.Linear(4, 2)", build)
    path = folder / name
    path.write_text(source)
    return path
