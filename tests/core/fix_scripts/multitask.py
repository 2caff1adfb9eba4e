"""Two heads on one trunk, each with its loss; the first backward keeps the graph for the
second (retain_graph=True), and the losses remember what they returned (losses.py): their
history keeps the first head's graph of every step (the bug `main.py fix` fixes there)."""
import argparse

import torch
from losses import TrackedMSE
from torch import nn


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
        self.head_a = nn.Linear(64, 2)
        self.head_b = nn.Linear(64, 2)

    def forward(self, x):
        feats = self.trunk(x)
        return self.head_a(feats), self.head_b(feats)


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = TwoHeads()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.loss_a, self.loss_b = TrackedMSE(), TrackedMSE()

    def fit(self, steps):
        for step in range(steps):
            x, ya, yb = torch.randn(32, 16), torch.randn(32, 2), torch.randn(32, 2)
            self.opt.zero_grad()
            out_a, out_b = self.model(x)
            loss_a = self.loss_a(out_a, ya)
            loss_a.backward(retain_graph=True)  # the trunk's graph is needed again below
            loss_b = self.loss_b(out_b, yb)
            loss_b.backward()
            self.opt.step()
            print(f"step {step} loss a {loss_a.item():.4f} b {loss_b.item():.4f}")
        curve = torch.stack(self.loss_a.history)
        print(f"head a: first {curve[0]:.4f} last {curve[-1]:.4f}")
        return loss_a, loss_b


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    Trainer().fit(parser.parse_args().steps)
