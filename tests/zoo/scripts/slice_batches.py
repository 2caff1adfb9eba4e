"""The loop many tutorials write when the whole dataset fits in one tensor: batches sliced
out of it with `X[i*32:(i+1)*32]` (views of the one 4096x20 storage), Adam, cross
entropy."""
import argparse

import torch
import torch.nn as nn

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
torch.manual_seed(0)

X = torch.randn(4096, 20)
Y = (X[:, :4].sum(1) > 0).long()
batch_size = 32
n_batches = 4

model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
zoo_truth.track(model)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(args.epochs):
    for i in range(n_batches):
        xb = X[i * batch_size:(i + 1) * batch_size]
        yb = Y[i * batch_size:(i + 1) * batch_size]
        pred = model(xb)
        loss = loss_fn(pred, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
zoo_truth.final(loss, model)
