"""Stochastic weight averaging as the torch.optim.swa_utils docs show it: a small CNN with
BatchNorm, SGD, an AveragedModel updated each epoch after swa_start with SWALR, and at the
end `torch.optim.swa_utils.update_bn(loader, swa_model)` to recompute the averaged model's
BatchNorm statistics (update_bn runs the model in train mode under no_grad on purpose),
then an evaluation of swa_model."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel
from torch.utils.data import DataLoader, TensorDataset

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
torch.manual_seed(0)

loader = DataLoader(TensorDataset(torch.randn(64, 3, 16, 16), torch.randint(0, 5, (64,))),
                    batch_size=16, shuffle=True)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
swa_model = AveragedModel(model)
zoo_truth.track(model, swa_model)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
swa_start = 1
swa_scheduler = SWALR(optimizer, swa_lr=0.05)

for epoch in range(args.epochs):
    for input, target in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(input), target)
        loss.backward()
        optimizer.step()
    if epoch >= swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")

torch.optim.swa_utils.update_bn(loader, swa_model)
swa_model.eval()
with torch.no_grad():
    correct = sum((swa_model(x).argmax(1) == y).sum().item() for x, y in loader)
print(f"swa accuracy {correct / len(loader.dataset):.3f}")
zoo_truth.final(loss, model)
