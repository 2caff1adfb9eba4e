"""A small MLP trained through `torch.compile(model)`, as the PyTorch 2 tutorials write it:
the compiled module called in the loop, AdamW, MSE on random regression data. --backend
picks the compiler backend (inductor by default; aot_eager is quicker)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 1)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--backend", default="inductor")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = MLP()
    zoo_truth.track(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend=args.backend)
    X, Y = torch.randn(args.steps, 32, 16), torch.randn(args.steps, 32, 1)
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(compiled(X[step]), Y[step])
        loss.backward()
        opt.step()
        if step % 4 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    zoo_truth.final(loss, model)


if __name__ == "__main__":
    main()
