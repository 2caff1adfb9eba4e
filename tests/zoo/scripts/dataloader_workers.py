"""A map-style Dataset that makes each sample in __getitem__ (a random "augmentation"), read
through `DataLoader(num_workers=2)`: worker processes feed the loop; SGD, cross entropy."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

import zoo_truth


class NoisySquares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        label = idx % 2
        img = torch.randn(1, 12, 12, generator=g) * 0.5
        if label:
            img[:, 3:9, 3:9] += 1.0
        return img, label


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 6 * 6, 2)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(x.flatten(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(NoisySquares(96), batch_size=16, shuffle=False, num_workers=2)
    model = SmallNet()
    zoo_truth.track(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        for images, labels in loader:
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    zoo_truth.final(loss, model)


if __name__ == "__main__":
    main()
