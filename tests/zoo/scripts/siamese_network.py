"""Siamese network in the shape of pytorch/examples siamese_network/main.py: one shared
feature extractor (a small conv stack standing in for resnet18) applied to two images in one
forward, the two embeddings concatenated into an fc head, BCELoss, Adadelta, StepLR; pairs
drawn from random "digits" by a Dataset whose __getitem__ picks same/different classes."""
import argparse
import random

import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset

import zoo_truth


class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((1, 1)),
        )
        self.fc_in_features = 32
        self.fc = nn.Sequential(
            nn.Linear(self.fc_in_features * 2, 64),
            nn.ReLU(inplace=True),
            nn.Linear(64, 1),
        )
        self.sigmoid = nn.Sigmoid()
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.features(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output = torch.cat((output1, output2), 1)
        return self.sigmoid(self.fc(output))


class PairDataset(Dataset):
    def __init__(self, n):
        self.data = torch.randn(n, 1, 28, 28)
        self.targets = torch.randint(0, 10, (n,))
        self.grouped = {c: torch.nonzero(self.targets == c).flatten().tolist() for c in range(10)}

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        c = random.randint(0, 9)
        i1 = random.choice(self.grouped[c])
        if index % 2 == 0:
            i2 = random.choice(self.grouped[c])
            target = torch.tensor(1, dtype=torch.float)
        else:
            other = random.choice([k for k in range(10) if k != c])
            i2 = random.choice(self.grouped[other])
            target = torch.tensor(0, dtype=torch.float)
        return self.data[i1].clone(), self.data[i2].clone(), target


def train(model, train_loader, optimizer, epoch):
    model.train()
    criterion = nn.BCELoss()
    for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
        optimizer.zero_grad()
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        print('Train Epoch: {} [{}]\tLoss: {:.6f}'.format(epoch, batch_idx, loss.item()))
    return loss.item()


def test(model, test_loader):
    model.eval()
    test_loss, correct = 0, 0
    criterion = nn.BCELoss()
    with torch.no_grad():
        for images_1, images_2, targets in test_loader:
            outputs = model(images_1, images_2).squeeze()
            test_loss += criterion(outputs, targets).sum().item()
            pred = torch.where(outputs > 0.5, 1, 0)
            correct += pred.eq(targets.view_as(pred)).sum().item()
    print('Test set: Average loss: {:.4f}, Accuracy: {}/{}'.format(
        test_loss / len(test_loader.dataset), correct, len(test_loader.dataset)))


def main():
    parser = argparse.ArgumentParser(description='PyTorch Siamese network Example')
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--lr', type=float, default=1.0)
    parser.add_argument('--gamma', type=float, default=0.7)
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    train_loader = DataLoader(PairDataset(128), batch_size=32)
    test_loader = DataLoader(PairDataset(64), batch_size=64)
    model = SiameseNetwork()
    zoo_truth.track(model)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        last = train(model, train_loader, optimizer, epoch)
        test(model, test_loader)
        scheduler.step()
    zoo_truth.final(last, model)


if __name__ == '__main__':
    main()
