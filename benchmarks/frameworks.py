"""The cost of memlens's framework callbacks, side by side in one process: blocks of
Lightning fits (and of Hugging Face Trainer runs), alternately plain and with
MemlensCallback, each block's median step time (a timing callback of the framework's own
step hooks), the median of neighbouring blocks' ratios with a 95% bootstrap interval.

    OMP_NUM_THREADS=1 python -m benchmarks.frameworks [--pairs N] [--steps N] [--only NAME]

Prints one line per framework: watched/plain, [low, high], pairs, plain median step ms.
Not a test (a shared machine's timing is noise for asserts): docs/frameworks.md keeps the
figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from memlens.core.stats import median_pair_ratio

SKIP = 3  # steps dropped at the start of each fit (the watch finds the model, the probe)


def lightning_block(steps: int, watched: bool) -> list[float]:
    import lightning as L
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from memlens.integrations.lightning import MemlensCallback

    class Clock(L.Callback):
        def __init__(self):
            self.ms: list[float] = []

        def on_train_batch_start(self, *args):
            self.t = time.perf_counter()

        def on_train_batch_end(self, *args):
            self.ms.append((time.perf_counter() - self.t) * 1e3)

    class MLP(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512),
                                     nn.ReLU(), nn.Linear(512, 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(64 * steps, 256), torch.randint(0, 10, (64 * steps,)))
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        callbacks = [clock] + ([MemlensCallback(out=os.path.join(tmp, "run"))] if watched
                               else [])
        trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=callbacks)
        trainer.fit(MLP(), DataLoader(data, batch_size=64))
    return clock.ms[SKIP:]


def transformers_block(steps: int, watched: bool) -> list[float]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers

    from memlens.integrations.transformers import MemlensCallback

    class Clock(transformers.TrainerCallback):
        def __init__(self):
            self.ms: list[float] = []

        def on_step_begin(self, *args, **kwargs):
            self.t = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            self.ms.append((time.perf_counter() - self.t) * 1e3)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n):
            self.ids = torch.randint(0, 256, (n, 32), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=32))
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        callbacks = [clock] + ([MemlensCallback(out=os.path.join(tmp, "run"))] if watched
                               else [])
        args = transformers.TrainingArguments(
            output_dir=tmp, max_steps=steps, per_device_train_batch_size=8,
            save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, seed=0,
            logging_steps=10_000)
        transformers.Trainer(model=model, args=args, train_dataset=Tokens(8 * steps),
                             callbacks=callbacks).train()
    return clock.ms[SKIP:]


BLOCKS = {"lightning": lightning_block, "transformers": transformers_block}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--only", choices=sorted(BLOCKS))
    args = parser.parse_args()
    for name, block in BLOCKS.items():
        if args.only and name != args.only:
            continue
        block(args.steps, False)  # warm-up: imports, first-fit costs
        plain, watched = [], []
        for i in range(args.pairs):  # alternate which side goes first
            first, second = (False, True) if i % 2 == 0 else (True, False)
            a = statistics.median(block(args.steps, first))
            b = statistics.median(block(args.steps, second))
            plain.append(b if first else a)
            watched.append(a if first else b)
        ci = median_pair_ratio(plain, watched)
        print(f"{name}: watched/plain {ci.ratio:.3f} [{ci.low:.3f}, {ci.high:.3f}] over "
              f"{len(plain)} pairs; plain step {statistics.median(plain):.2f} ms, "
              f"watched {statistics.median(watched):.2f} ms", flush=True)


if __name__ == "__main__":
    main()
