"""A function-based loop: train_step() and evaluate() functions, a functional loss."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# The edited script a test compares with: autocast around forward and loss from a step on
AMP_AT = dict(a.split(":") for a in os.environ.get("AMP_AT", "").split(",") if a)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_model():
    return nn.Sequential(nn.Linear(24, 48), nn.Tanh(), nn.Linear(48, 48), nn.Tanh(),
                         nn.Linear(48, 3))


def amp_for(step):
    on = [(int(s), d) for s, d in AMP_AT.items() if int(s) <= step]
    return max(on)[1] if on else None


def train_step(model, opt, x, y, step):
    opt.zero_grad()
    dtype = amp_for(step)
    if dtype is not None:
        with torch.autocast("cpu", dtype=DTYPES[dtype]):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
    else:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(3)
    for step in range(int(os.environ.get("STEPS", "8"))):
        x, y = torch.randn(20, 24, generator=gen), torch.randint(0, 3, (20,), generator=gen)
        print(f"step {step} loss {train_step(model, opt, x, y, step)!r}", flush=True)


if __name__ == "__main__":
    main()
