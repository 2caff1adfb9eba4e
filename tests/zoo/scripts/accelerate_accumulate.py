"""accelerate's own training loop (its docs' shape): Accelerator(gradient_accumulation_steps=
--accum), prepare(), `with accelerator.accumulate(model):` around each micro-batch, with
accelerator.backward, optimizer.step() and zero_grad() called at every micro-batch (the
wrapped optimizer steps only at an accumulation's end)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--accum", type=int, default=2)
args = parser.parse_args()
torch.manual_seed(0)

accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accum)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.TensorDataset(torch.randn(96, 16), torch.randint(0, 4, (96,)))
loader = torch.utils.data.DataLoader(data, batch_size=8)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
zoo_truth.track(model)

steps = 0
for epoch in range(args.epochs):
    for inputs, labels in loader:
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(inputs), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            steps += accelerator.sync_gradients
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")
zoo_truth.final(loss, model, steps=steps)
