"""BUG: validation predictions kept by batch in a dict (`preds[i] = model(x)`), under grad:
each entry holds its graph until the next validation replaces it, so every validation's
graphs are alive through the next training step. (The fix: `with torch.no_grad():`.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
zoo_truth.track(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
val_batches = [torch.randn(64, 32) for _ in range(3)]
preds = {}
for step in range(args.steps):
    x, y = torch.randn(32, 32), torch.randint(0, 4, (32,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    model.eval()
    for i, xv in enumerate(val_batches):
        preds[i] = model(xv)  # BUG: under grad
    model.train()
print("val classes", [p.argmax(1).bincount(minlength=4).tolist() for p in preds.values()])
zoo_truth.final(loss, model)
