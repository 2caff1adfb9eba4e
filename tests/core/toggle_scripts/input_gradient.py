"""A model whose forward differentiates its output by its input (a physics-informed net):
it needs grad even when evaluated, so a validation under no_grad fails inside it."""
import torch
import torch.nn as nn


class Gradient(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        x = x.detach().requires_grad_(True)
        (dx,) = torch.autograd.grad(self.net(x).sum(), x, create_graph=True)
        return dx


torch.manual_seed(0)
model = Gradient()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(7)
xv = torch.randn(10, 4, generator=gen)
for step in range(6):
    x = torch.randn(10, 4, generator=gen)
    opt.zero_grad()
    loss = (model(x) ** 2).mean()
    loss.backward()
    opt.step()
    val = (model(xv) ** 2).mean().item()
    print(f"step {step} loss {loss.item()!r} val {val!r}", flush=True)
