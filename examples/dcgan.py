"""A small DCGAN on random 16x16 images: two models, two optimizers, D(fake.detach()) for
the discriminator's step, and a sample from fixed noise every few steps (under grad, as
many scripts do: memlens watch points out what that costs).

Plain PyTorch, no memlens: record it with `python main.py watch examples/dcgan.py`.
Options: --steps N, --sample-every N, --times FILE (each step's wall and thread CPU time in
ms, one step a line).
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--sample-every", type=int, default=10)
parser.add_argument("--times", help="write each step's time (ms) to this file")
args = parser.parse_args()
torch.manual_seed(0)

NZ, NGF, NDF, BATCH = 16, 16, 16, 32
netG = nn.Sequential(
    nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 2), nn.ReLU(True),
    nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(True),
    nn.ConvTranspose2d(NGF, 1, 4, 2, 1, bias=False), nn.Tanh(),
)
netD = nn.Sequential(
    nn.Conv2d(1, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2),
    nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False), nn.Flatten(), nn.Sigmoid(),
)
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
criterion = nn.BCELoss()
fixed_noise = torch.randn(16, NZ, 1, 1)
real_images = torch.rand(512, 1, 16, 16) * 2 - 1
ones, zeros = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)
samples = []
times = []
for step in range(args.steps):
    t0, c0 = time.perf_counter(), time.thread_time()
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
    times.append(((time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3))
    if step % 50 == 0 or step == args.steps - 1:
        print(f"step {step}: loss D {errD.item():.4f} G {errG.item():.4f}")
if args.times:
    with open(args.times, "w") as fh:
        fh.write("\n".join(f"{t:.4f} {c:.4f}" for t, c in times) + "\n")
