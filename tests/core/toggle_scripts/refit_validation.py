"""A loop that, at one step, backwards its own validation output (a fine-tune on the
validation batch): no_grad_eval made that forward graph-less, so that backward fails."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(6)
xv, yv = torch.randn(12, 8, generator=gen), torch.randn(12, 1, generator=gen)
for step in range(6):
    x, y = torch.randn(12, 8, generator=gen), torch.randn(12, 1, generator=gen)
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    val = F.mse_loss(model(xv), yv)
    if step == 4:
        val.backward()
    print(f"step {step} loss {loss.item()!r} val {val.item()!r}", flush=True)
