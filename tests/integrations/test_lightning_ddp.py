"""MemlensCallback under Lightning's DDP (two CPU processes, gloo): one run folder per rank
inside the job's, each rank's steps and losses as that rank's training_step returned them,
and the same grad norm on both (DDP averages the gradients before the optimizer sees them),
and `main.py ranks` reading the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("lightning")

from memlens.core.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from memlens.integrations.lightning import MemlensCallback
    from tests.integrations.test_lightning_callback import TinyClassifier  # records its losses

    if __name__ == "__main__":
        L.seed_everything(0, verbose=False)
        data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
        model = TinyClassifier()
        trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy="ddp",
                            logger=False, default_root_dir=sys.argv[1],
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[MemlensCallback()])
        trainer.fit(model, DataLoader(data, batch_size=8))
        with open(f"{sys.argv[1]}/losses{trainer.global_rank}.json", "w") as f:
            json.dump({"losses": model.batch_losses, "steps": trainer.global_step}, f)
""")


def test_a_ddp_fit_gets_a_run_folder_per_rank_with_that_ranks_numbers(tmp_path):
    script = tmp_path / "ddp_fit.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    job = tmp_path / "memlens"
    assert sorted(p.name for p in job.iterdir()) == ["rank0", "rank1"]
    norms = []
    for rank in (0, 1):
        truth = json.loads((tmp_path / f"losses{rank}.json").read_text())
        folder = job / f"rank{rank}"
        doc = json.loads((folder / "run.json").read_text())
        assert (doc["rank"], doc["world_size"]) == (rank, 2)
        steps = load_run(folder).steps
        assert len(steps) == truth["steps"] == 4  # 64 samples, 2 ranks, batches of 8
        assert steps.column("loss").tolist() == pytest.approx(truth["losses"], rel=1e-5)  # 6 digits
        norms.append(steps.column("grad_norm").tolist())
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)  # all-reduced: one gradient
    # the two ranks' batches differ (DistributedSampler), so their losses do
    losses = [json.loads((tmp_path / f"losses{r}.json").read_text())["losses"] for r in (0, 1)]
    assert losses[0] != losses[1]
    ranks = subprocess.run([sys.executable, str(ROOT / "main.py"), "ranks", str(job)],
                           capture_output=True, text=True, timeout=300)
    assert ranks.returncode == 0, ranks.stderr
    imbalance, buckets = ranks.stdout.splitlines()[-2:]
    assert imbalance.startswith("2 ranks;") and buckets.startswith("DDP's gradient buckets:")
