"""MemlensCallback under Lightning's FSDP2 (ModelParallelStrategy: `fully_shard` in
configure_model) on two CPU processes (gloo): every rank records every step, its losses as
its training_step returned them, its parameters as its local shards and the parameters FSDP
gathers as a figure of their own. (Lightning's FSDPStrategy, FSDP1, refuses a CPU
accelerator: "requires a GPU accelerator".)"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import lightning as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from lightning.pytorch.strategies import ModelParallelStrategy
    from memlens.integrations.lightning import MemlensCallback

    class Sharded(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 33), nn.ReLU(), nn.Linear(33, 1))
            self.batch_losses = []

        def configure_model(self):
            from torch.distributed.fsdp import fully_shard
            fully_shard(self.net[0])
            fully_shard(self.net)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.batch_losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=0.01)

    if __name__ == "__main__":
        L.seed_everything(0, verbose=False)
        data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        model = Sharded()
        trainer = L.Trainer(
            max_epochs=1, accelerator="cpu", devices=2, logger=False,
            strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
            default_root_dir=sys.argv[1], enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
            callbacks=[MemlensCallback()])
        trainer.fit(model, DataLoader(data, batch_size=8))
        shards = [p.to_local().untyped_storage() for p in model.parameters()]
        local = {s.data_ptr(): s.nbytes() for s in shards}  # each rank's, each storage once
        with open(f"{sys.argv[1]}/truth{trainer.global_rank}.json", "w") as f:
            json.dump({"losses": model.batch_losses, "steps": trainer.global_step,
                       "params": sum(local.values())}, f)
""")


def test_an_fsdp2_fit_records_each_ranks_shard_and_what_fsdp_gathers(tmp_path):
    script = tmp_path / "fsdp_fit.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        truth = json.loads((tmp_path / f"truth{rank}.json").read_text())
        folder = tmp_path / "memlens" / f"rank{rank}"
        doc = json.loads((folder / "run.json").read_text())
        assert doc["sharding"]["kind"] == "fsdp2" and doc["sharding"]["world_size"] == 2
        with open(folder / "steps.csv", newline="") as fh:
            steps = list(csv.DictReader(fh))
        assert len(steps) == truth["steps"] == 4  # 64 samples, 2 ranks, batches of 8
        assert [float(s["loss"]) for s in steps] == pytest.approx(truth["losses"], rel=1e-5)
        with open(folder / "memory.csv", newline="") as fh:
            samples = list(csv.DictReader(fh))
        assert {int(s["params_bytes"]) for s in samples} == {truth["params"]}
        gathered = [int(s["gathered_bytes"]) for s in samples]
        assert max(gathered) > 0 and gathered[-1] == 0  # gathered for a use, freed after
