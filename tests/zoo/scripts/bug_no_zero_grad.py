"""BUG: the loop never clears the gradients: each backward adds into .grad, so every step
applies the sum of all the gradients so far. (The fix: optimizer.zero_grad() each step.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
zoo_truth.track(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 16), torch.randn(64, 1)

for step in range(args.steps):
    loss = F.mse_loss(model(x), y)
    loss.backward()  # BUG: no optimizer.zero_grad() before
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
zoo_truth.final(loss, model)
