"""BUG: a module keeps its activations for a later look (a debugging or visualisation hook
written into forward): `self.activations.append(h)` keeps each step's hidden output with its
autograd graph, and the list grows every step. (The fix: append `h.detach()`, or clear it.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 128)
        self.activations = []

    def forward(self, x):
        h = F.relu(self.fc(x))
        self.activations.append(h)  # BUG: with its graph, every step
        return h


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(Encoder(), nn.Linear(128, 4))
zoo_truth.track(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(args.steps):
    x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print(f"kept {len(model[0].activations)} activations")
zoo_truth.final(loss, model)
