"""A 2 ms training step of the most common shape, for benchmarks/watch.py: an MLP with
Adam, `zero_grad`, forward, a loss module, backward, `step` (the loop of PyTorch's
tutorials), sized so that a step takes about 2 ms on one CPU thread. The watch benchmark
runs its `train_step` in blocks, plain and watched (benchmarks/_watch_probe.py).
"""

import torch
from torch import nn

torch.manual_seed(0)
WIDTH = 512
model = nn.Sequential(nn.Linear(256, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                      nn.Linear(WIDTH, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
inputs, labels = torch.randn(64, 256), torch.randint(0, 10, (64,))


def train_step(step: int) -> float:
    optimizer.zero_grad()
    loss = criterion(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()
