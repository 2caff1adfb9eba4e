"""A DCGAN on random 32x32 RGB images (CIFAR-10's size): two models, two optimizers,
D(fake.detach()) for the discriminator's step, and a sample from fixed noise every few steps
(under grad, as many scripts do: memlens watch points out what that costs). The paper's
layout and latent size (100), at 32 feature maps and batch 32.

Plain PyTorch, no memlens: record it with `python main.py watch examples/dcgan.py`.
Options: --steps N, --sample-every N, --times FILE (each step's wall and thread CPU time in
ms, one step a line), --tiny (16x16 grey images, 16 feature maps, latent 16: a step of a few
milliseconds).
"""

import argparse
import itertools
import math

import torch
from _timed_steps import timed_steps
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--sample-every", type=int, default=10)
parser.add_argument("--times", help="write each step's time (ms) to this file")
parser.add_argument("--tiny", action="store_true", help="toy sizes: a step of a few ms")
args = parser.parse_args()
torch.manual_seed(0)

NZ, NGF, NDF, BATCH, CH, SIZE = (16, 16, 16, 32, 1, 16) if args.tiny else (100, 32, 32, 32, 3, 32)


def up(cin, cout, first=False):  # a transposed convolution that doubles the size (4x at first)
    conv = nn.ConvTranspose2d(cin, cout, 4, 1, 0, bias=False) if first else (
        nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False))
    return [conv, nn.BatchNorm2d(cout), nn.ReLU(True)]


def down(cin, cout, norm=True):  # a convolution that halves the size
    return [nn.Conv2d(cin, cout, 4, 2, 1, bias=False),
            *([nn.BatchNorm2d(cout)] if norm else []), nn.LeakyReLU(0.2, inplace=True)]


# 4x4 from the noise, doubled up to SIZE; D halves SIZE down to 4x4, then one 4x4 conv.
widths = [NGF * 2 ** i for i in range(int(math.log2(SIZE)) - 2)][::-1]  # e.g. 128, 64, 32
netG = nn.Sequential(
    *up(NZ, widths[0], first=True),
    *[layer for a, b in itertools.pairwise(widths) for layer in up(a, b)],
    nn.ConvTranspose2d(widths[-1], CH, 4, 2, 1, bias=False), nn.Tanh(),
)
dwidths = [NDF * 2 ** i for i in range(int(math.log2(SIZE)) - 2)]  # e.g. 32, 64, 128
netD = nn.Sequential(
    *down(CH, dwidths[0], norm=False),
    *[layer for a, b in itertools.pairwise(dwidths) for layer in down(a, b)],
    nn.Conv2d(dwidths[-1], 1, 4, 1, 0, bias=False), nn.Flatten(), nn.Sigmoid(),
)
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
criterion = nn.BCELoss()
fixed_noise = torch.randn(16, NZ, 1, 1)
real_images = torch.rand(512, CH, SIZE, SIZE) * 2 - 1
ones, zeros = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)
samples = []


def train_step(step):
    real = real_images[(step * BATCH) % 512:][:BATCH]
    # discriminator: real up, fake down (the fake detached: G is not trained here)
    optD.zero_grad()
    noise = torch.randn(BATCH, NZ, 1, 1)
    fake = netG(noise)
    errD = criterion(netD(real), ones) + criterion(netD(fake.detach()), zeros)
    errD.backward()
    optD.step()
    # generator: make D call the fake real
    optG.zero_grad()
    errG = criterion(netD(fake), ones)
    errG.backward()
    optG.step()
    if step % args.sample_every == 0:
        sample = netG(fixed_noise)  # a progress picture, under grad
        samples.append(sample.detach().mean().item())
    return errD, errG


if __name__ == "__main__":
    timed_steps(train_step, args.steps, args.times, lambda step, errs: print(
        f"step {step}: loss D {errs[0].item():.4f} G {errs[1].item():.4f}"))
