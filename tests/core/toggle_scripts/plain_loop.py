"""A plain training loop as a user writes it: validation under grad and in train mode
(two bugs the toggles show), zero_grad() with torch's default."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
STEPS = int(os.environ.get("STEPS", "8"))
EVAL_FROM = int(os.environ.get("EVAL_FROM", "-1"))  # model.eval() for validation from here
NO_GRAD_FROM = int(os.environ.get("NO_GRAD_FROM", "-1"))  # torch.no_grad() from here
FORGET_FROM = int(os.environ.get("FORGET_FROM", "-1"))  # no zero_grad from here

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(1)
xv, yv = torch.randn(48, 32, generator=gen), torch.randint(0, 4, (48,), generator=gen)

for step in range(STEPS):
    # validation first in the iteration: the step's first samples are the validation's
    if 0 <= EVAL_FROM <= step:
        model.eval()
    if 0 <= NO_GRAD_FROM <= step:
        with torch.no_grad():
            out = model(xv)
    else:
        out = model(xv)
    val = F.cross_entropy(out, yv).item()
    model.train()
    x, y = torch.randn(16, 32, generator=gen), torch.randint(0, 4, (16,), generator=gen)
    if not 0 <= FORGET_FROM <= step:
        opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r} val {val!r}", flush=True)
