"""BUG: validation every few steps keeps the model's outputs in a list for an epoch-end
metric, in eval mode but without torch.no_grad(): each kept output holds its whole graph
and what it saved for backward, and the list grows. (The fix: `with torch.no_grad():`.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--val-every", type=int, default=2)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 4))
zoo_truth.track(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x_val, y_val = torch.randn(128, 32), torch.randint(0, 4, (128,))
val_outputs = []

for step in range(args.steps):
    model.train()
    x, y = torch.randn(32, 32), torch.randint(0, 4, (32,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if step % args.val_every == 0:
        model.eval()
        val_outputs.append(model(x_val))  # BUG: under grad, kept
acc = torch.stack([(o.argmax(1) == y_val).float().mean() for o in val_outputs]).mean()
print(f"val acc over the run {acc.item():.3f}")
zoo_truth.final(loss, model)
