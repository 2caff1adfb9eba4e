"""A class-based trainer: zero_grad(set_to_none=False) as older code writes it, validation
under torch.no_grad() in eval mode."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Trainer:
    def __init__(self, steps):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(16, 40), nn.ReLU(), nn.Linear(40, 2))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.steps = steps
        self.gen = torch.Generator().manual_seed(5)
        self.xv = torch.randn(32, 16, generator=self.gen)
        self.yv = torch.randint(0, 2, (32,), generator=self.gen)

    def validate(self):
        self.model.eval()
        with torch.no_grad():
            acc = (self.model(self.xv).argmax(1) == self.yv).float().mean().item()
        self.model.train()
        return acc

    def fit(self):
        for step in range(self.steps):
            x = torch.randn(16, 16, generator=self.gen)
            y = torch.randint(0, 2, (16,), generator=self.gen)
            self.opt.zero_grad(set_to_none=False)
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            self.opt.step()
            print(f"step {step} loss {loss.item()!r} acc {self.validate()!r}", flush=True)


if __name__ == "__main__":
    Trainer(int(os.environ.get("STEPS", "8"))).fit()
