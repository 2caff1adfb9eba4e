"""A plain loop long enough to be toggled while it runs (the app's tests stop it)."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                      nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(1)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3000):
    x, y = torch.randn(32, 64, generator=gen), torch.randint(0, 8, (32,), generator=gen)
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
