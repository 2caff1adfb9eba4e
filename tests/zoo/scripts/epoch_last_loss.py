"""The MNIST example's shape with one common change: train() returns the epoch's last loss
tensor (not .item()) and main() keeps it to print after test(). Backward has freed what that
graph saved: one loss of an earlier epoch is held, nothing grows. Clean."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

import zoo_truth


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def train(model, loader, optimizer):
    model.train()
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
    return loss


def test(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in loader:
            correct += model(data).argmax(1).eq(target).sum().item()
    return correct / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    train_loader = DataLoader(TensorDataset(torch.randn(256, 1, 28, 28),
                                            torch.randint(0, 10, (256,))), batch_size=64)
    test_loader = DataLoader(TensorDataset(torch.randn(64, 1, 28, 28),
                                           torch.randint(0, 10, (64,))), batch_size=64)
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(1, args.epochs + 1):
        loss = train(model, train_loader, optimizer)
        acc = test(model, test_loader)
        print(f'epoch {epoch}: last loss {loss.item():.4f} test acc {acc:.3f}')
    zoo_truth.final(loss, model)


if __name__ == '__main__':
    main()
