"""memlens.integrations.lightning.MemlensCallback end to end on a tiny LightningModule:
what it records against Lightning's own numbers (global_step, callback_metrics, the
gradients at on_before_optimizer_step) and a plain fit's parameters."""

from __future__ import annotations

import json
import math

import pytest
import torch

L = pytest.importorskip("lightning")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from memlens.core.runfolder.reader import load_run  # noqa: E402
from memlens.integrations.lightning import MemlensCallback  # noqa: E402


class TinyClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.batch_losses: list[float] = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.batch_losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class Truth(L.Callback):
    """Lightning's own numbers, in plain torch: the gradients' norm where Lightning hands
    them to the optimizer (before clipping), and the validation loss it computed."""

    def __init__(self):
        self.norms: list[float] = []
        self.val: dict[int, float] = {}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = [p.grad.flatten() for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(torch.cat(grads).norm().item())

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:  # the row of the step it ran after
            self.val[trainer.global_step - 1] = float(trainer.callback_metrics["val_loss"])


def fit(tmp_path, accumulate: int, callbacks):
    L.seed_everything(0, verbose=False)
    train = TensorDataset(torch.randn(96, 16), torch.randint(0, 4, (96,)))
    val = TensorDataset(torch.randn(32, 16), torch.randint(0, 4, (32,)))
    model = TinyClassifier()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                        default_root_dir=tmp_path, accumulate_grad_batches=accumulate,
                        gradient_clip_val=0.5, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=callbacks, num_sanity_val_steps=1)
    trainer.fit(model, DataLoader(train, batch_size=8), DataLoader(val, batch_size=16))
    return trainer, model


@pytest.mark.parametrize("accumulate", [1, 4])
def test_a_fit_recorded_by_the_callback_matches_lightnings_own_numbers(tmp_path, accumulate):
    # the plain fit's parameters as tensors: a model held in a variable counts as one
    plain = [p.detach() for p in fit(tmp_path / "plain", accumulate, [])[1].parameters()]
    truth, memlens = Truth(), MemlensCallback()
    trainer, model = fit(tmp_path / "watched", accumulate, [truth, memlens])
    for a, b in zip(plain, model.parameters(), strict=True):
        assert torch.equal(a, b)  # memlens changed nothing

    folder = tmp_path / "watched" / "memlens"  # under trainer.log_dir (no logger: the root)
    doc = json.loads((folder / "run.json").read_text())
    steps = load_run(folder).steps
    assert len(steps) == trainer.global_step == 24 // accumulate
    # before clipping, as Lightning hands them over; clipping did change some
    assert steps.column("grad_norm").tolist() == pytest.approx(truth.norms, rel=1e-5)
    assert max(truth.norms) > 0.5
    # the step's loss: what its backwards were given (Lightning's `loss / accumulate`),
    # added up: the mean of its micro-batches' losses as training_step returned them
    losses = model.batch_losses
    means = [sum(losses[i:i + accumulate]) / accumulate
             for i in range(0, len(losses), accumulate)]
    assert steps.column("loss").tolist() == pytest.approx(means, rel=1e-5)
    eval_loss = steps.column("eval_loss").tolist()
    assert {i for i, v in enumerate(eval_loss) if not math.isnan(v)} == set(truth.val)
    assert [eval_loss[i] for i in sorted(truth.val)] == pytest.approx(
        [truth.val[i] for i in sorted(truth.val)], rel=1e-5)
    assert [m["name"] for m in doc["models"]] == ["TinyClassifier"]
    assert {"sanity check", "validation"} <= set(doc["summary"]["extra"]["custom_phases_ms"])
    assert [e for e in doc["events"] if e["kind"] == "diagnosis"] == []


def test_a_second_fit_in_the_same_folder_gets_a_fresh_run_folder(tmp_path):
    fit(tmp_path, 1, [MemlensCallback()])
    fit(tmp_path, 1, [MemlensCallback()])
    assert (tmp_path / "memlens" / "run.json").exists()
    assert (tmp_path / "memlens-2" / "run.json").exists()
