"""Sub-pixel super-resolution in the shape of pytorch/examples super_resolution: four convs
and a PixelShuffle, MSELoss, Adam, a DataLoader of (low-res, high-res) pairs made from random
"images", a PSNR test under no_grad after each epoch (no model.eval(): the net has neither
dropout nor batch norm), and a torch.save checkpoint of the whole model each epoch."""
import argparse
import os
import tempfile
from math import log10

import torch
import torch.nn as nn
import torch.nn.init as init
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

import zoo_truth


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 32, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(32, 32, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(32, 16, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(16, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))


parser = argparse.ArgumentParser(description='PyTorch Super Res Example')
parser.add_argument('--upscale_factor', type=int, default=2)
parser.add_argument('--batchSize', type=int, default=8)
parser.add_argument('--nEpochs', '--epochs', type=int, default=2)
parser.add_argument('--lr', type=float, default=0.01)
parser.add_argument('--seed', type=int, default=123)
opt = parser.parse_args()
torch.manual_seed(opt.seed)

high = torch.rand(32, 1, 32, 32)
low = F.interpolate(high, scale_factor=1 / opt.upscale_factor, mode='bicubic', align_corners=False)
training_data_loader = DataLoader(TensorDataset(low[:24], high[:24]), batch_size=opt.batchSize, shuffle=True)
testing_data_loader = DataLoader(TensorDataset(low[24:], high[24:]), batch_size=8, shuffle=False)

model = Net(upscale_factor=opt.upscale_factor)
zoo_truth.track(model)
criterion = nn.MSELoss()
optimizer = optim.Adam(model.parameters(), lr=opt.lr)
out_dir = tempfile.mkdtemp()


def train(epoch):
    epoch_loss = 0
    for iteration, batch in enumerate(training_data_loader, 1):
        input, target = batch[0], batch[1]
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
        print("===> Epoch[{}]({}/{}): Loss: {:.4f}".format(epoch, iteration, len(training_data_loader), loss.item()))
    return loss.item()


def test():
    avg_psnr = 0
    with torch.no_grad():
        for batch in testing_data_loader:
            prediction = model(batch[0])
            mse = criterion(prediction, batch[1])
            avg_psnr += 10 * log10(1 / mse.item())
    print("===> Avg. PSNR: {:.4f} dB".format(avg_psnr / len(testing_data_loader)))


def checkpoint(epoch):
    model_out_path = os.path.join(out_dir, "model_epoch_{}.pth".format(epoch))
    torch.save(model, model_out_path)
    print("Checkpoint saved to {}".format(model_out_path))


for epoch in range(1, opt.nEpochs + 1):
    last = train(epoch)
    test()
    checkpoint(epoch)
zoo_truth.final(last, model)
