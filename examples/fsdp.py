"""A small MLP trained with FSDP2 as its tutorial does it: `fully_shard` on each block and on
the root, AdamW, each rank on its own batches. Its default sizes are those of memlens's
sharded tests (tests/core/sharded_job.py: width 33, two blocks, batch 16; 33 rows do not
divide over 2 ranks, so every shard is uneven). Runs on CPU (gloo) or on GPUs (NCCL).

Plain PyTorch, no memlens: run it under torchrun, and record it with `main.py watch`:

    torchrun --nproc_per_node 2 examples/fsdp.py
    torchrun --nproc_per_node 2 main.py watch --out runs/fsdp examples/fsdp.py
    python main.py ranks runs/fsdp

Options: --steps N, --times FILE (each step's wall and thread CPU time in ms, one step a
line; FILE gets the rank's number), --width N, --blocks N, --batch N, --keep
(reshard_after_forward=False: every block's parameters stay gathered from its forward to its
backward).
"""

import argparse
import os

import torch
import torch.distributed as dist
from _timed_steps import timed_steps
from torch import nn
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--times", help="write each step's time (ms) to this file + the rank")
parser.add_argument("--width", type=int, default=33)
parser.add_argument("--blocks", type=int, default=2)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--keep", action="store_true", help="reshard_after_forward=False")
args = parser.parse_args()

cuda = torch.cuda.is_available()
if not dist.is_initialized():
    dist.init_process_group("nccl" if cuda else "gloo")
rank = dist.get_rank()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else \
    torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.lin(x))


class MLP(nn.Module):
    def __init__(self, width, blocks):
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(blocks))
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


torch.manual_seed(0)  # the same initial model on every rank
model = MLP(args.width, args.blocks).to(device)
for block in model.blocks:
    fully_shard(block, reshard_after_forward=not args.keep)
fully_shard(model, reshard_after_forward=not args.keep)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.manual_seed(1 + rank)  # each rank its own batches
data = [(torch.randn(args.batch, 8, device=device), torch.randn(args.batch, 1, device=device))
        for _ in range(16)]


def train_step(step):
    x, y = data[step % len(data)]
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def say(step, loss):
    if rank == 0:
        print(f"step {step}: loss {loss.item()!r}")  # every digit: compared bit for bit


if __name__ == "__main__":
    timed_steps(train_step, args.steps, f"{args.times}{rank}" if args.times else None, say,
                every=10, sync=torch.cuda.synchronize if cuda else None)
    dist.destroy_process_group()
