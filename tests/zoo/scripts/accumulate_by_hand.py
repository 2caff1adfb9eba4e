"""Gradient accumulation written by hand, as the forums recommend it: the loss divided by
the accumulation count, backward every micro-batch, optimizer.step() and zero_grad() every
--accum micro-batches."""
import argparse

import torch
import torch.nn as nn

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--accum", type=int, default=4)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(24, 96), nn.ReLU(), nn.Dropout(0.1), nn.Linear(96, 3))
zoo_truth.track(model)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(256, 24), torch.randint(0, 3, (256,))),
    batch_size=16)

model.train()
optimizer.zero_grad()
for epoch in range(args.epochs):
    for i, (inputs, labels) in enumerate(loader):
        outputs = model(inputs)
        loss = criterion(outputs, labels) / args.accum
        loss.backward()
        if (i + 1) % args.accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    print(f"epoch {epoch} loss {loss.item() * args.accum:.4f}")
zoo_truth.final(loss, model)
