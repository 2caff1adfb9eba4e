"""memlens.integrations.transformers.MemlensCallback end to end: a Trainer on a tiny GPT-2
built from its config (no download), with and without gradient accumulation, against the
Trainer's own log (loss, grad_norm before clipping, eval_loss) and a plain run."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from memlens.core.runfolder.reader import load_run  # noqa: E402
from memlens.integrations.transformers import MemlensCallback  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids = torch.randint(0, 64, (n, 12), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def train(tmp_path, accum: int, callbacks):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), num_train_epochs=2, per_device_train_batch_size=4,
        per_device_eval_batch_size=8, gradient_accumulation_steps=accum, learning_rate=5e-3,
        max_grad_norm=0.5, logging_steps=1, eval_strategy="epoch", save_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, seed=0, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(32, 1),
                                   eval_dataset=Tokens(8, 2), callbacks=callbacks)
    trainer.train()
    return trainer, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("accum", [1, 4])
def test_a_trainer_recorded_by_the_callback_matches_its_own_log(tmp_path, accum):
    _, plain = train(tmp_path / "plain", accum, [])
    trainer, params = train(tmp_path / "watched", accum, [MemlensCallback()])
    for a, b in zip(plain, params, strict=True):
        assert torch.equal(a, b)  # memlens changed nothing

    folder = tmp_path / "watched" / "memlens"
    doc = json.loads((folder / "run.json").read_text())
    steps = load_run(folder).steps
    assert len(steps) == trainer.state.global_step == 16 // accum
    log = trainer.state.log_history
    train_log = {e["step"]: e for e in log if "loss" in e}  # logging_steps=1: every step
    eval_log = {e["step"]: e["eval_loss"] for e in log if "eval_loss" in e}
    assert sorted(train_log) == list(range(1, len(steps) + 1))
    # HF logs the loss rounded to 4 decimals; its grad_norm is the one before clipping
    assert steps.column("loss").tolist() == pytest.approx(
        [train_log[s]["loss"] for s in sorted(train_log)], abs=1e-4)
    hf_norms = [train_log[s]["grad_norm"] for s in sorted(train_log)]
    assert steps.column("grad_norm").tolist() == pytest.approx(hf_norms, rel=1e-4)
    assert max(hf_norms) > 0.5  # clipping changed the gradients the optimizer used
    # an evaluation after global step g is in row g - 1
    eval_loss = steps.column("eval_loss").tolist()
    assert {i for i, v in enumerate(eval_loss) if not math.isnan(v)} == {
        s - 1 for s in eval_log}
    assert [eval_loss[s - 1] for s in sorted(eval_log)] == pytest.approx(
        [eval_log[s] for s in sorted(eval_log)], rel=1e-5)
    assert [m["name"] for m in doc["models"]] == ["GPT2LMHeadModel"]
    assert [e for e in doc["events"] if e["kind"] in ("diagnosis", "info")] == []
