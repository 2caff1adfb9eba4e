"""A 2-rank DDP script (gloo, CPU) under torchrun: each rank records its own folder."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.core.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]

DDP_SCRIPT = """
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank + 1)  # each rank its own data: DDP's all-reduce makes them agree
for step in range(3):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
import sys
from pathlib import Path
checksum = sum(p.double().sum().item() for p in model.parameters()).hex()
Path(sys.argv[1], f"checksum{rank}.txt").write_text(checksum)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun is not installed next to this Python")
def test_two_rank_ddp_records_one_folder_per_rank(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    p = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(_free_port()),
         str(ROOT / "main.py"), "watch", str(script), "--precise", "--out", str(tmp_path / "run"),
         "--", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-2000:]
    # Each rank writes its own file: two ranks printing to one pipe can lose or mix lines.
    sums = [(tmp_path / f"checksum{rank}.txt").read_text() for rank in (0, 1)]
    assert sums[0] == sums[1] and sums[0].startswith(("0x", "-0x"))  # the same parameters
    for rank in (0, 1):
        folder = tmp_path / "run" / f"rank{rank}"
        doc = json.loads((folder / "run.json").read_text())
        assert (doc["rank"], doc["world_size"]) == (rank, 2)
        history = load_run(folder)
        assert len(history.steps) == 3
        # DDP's gradient bucket (a flat copy of the gradients, as large as the parameters)
        # is no parameter, gradient or optimizer state: it is `buckets`, and precise mode's
        # `temporaries` (the storages no category holds) no longer holds it.
        cols = history.samples.columns
        rows = [r for r in history.samples.rows() if r[0] == 1 and r[1] == 1]  # zero_grad
        params = sum(4 * n for n in (8 * 32, 32, 32, 1))  # the Sequential's, float32
        assert rows[0][cols.index("params")] == rows[0][cols.index("buckets")] == params
        assert rows[0][cols.index("temporaries")] < params
