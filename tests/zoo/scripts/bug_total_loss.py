"""BUG: the running loss summed as a tensor (`total_loss += loss`) for an epoch average:
every step's graph stays reachable from total_loss until the epoch ends. (The fix:
`total_loss += loss.item()`.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
zoo_truth.track(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = [(torch.randn(32, 32), torch.randn(32, 1)) for _ in range(6)]


def train_epoch():
    total_loss = 0
    for x, y in data:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss  # BUG: keeps every step's graph
    return total_loss / len(data)


for epoch in range(args.epochs):
    avg = train_epoch()
    print(f"epoch {epoch} mean loss {avg.item():.4f}")
zoo_truth.final(avg, model)
