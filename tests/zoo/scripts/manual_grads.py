"""Gradients taken with torch.autograd.grad and handed to the optimizer by hand
(`p.grad = g`), as meta-learning and gradient-surgery code does, with an L2 penalty
added to the grads; Adam steps them. No loss.backward() anywhere."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(10, 48), nn.Tanh(), nn.Linear(48, 1))
zoo_truth.track(model)
params = list(model.parameters())
opt = torch.optim.Adam(params, lr=1e-2)

for step in range(args.steps):
    x, y = torch.randn(32, 10), torch.randn(32, 1)
    loss = F.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, params)
    for p, g in zip(params, grads):
        p.grad = g + 1e-4 * p.detach()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
zoo_truth.final(loss, model)
