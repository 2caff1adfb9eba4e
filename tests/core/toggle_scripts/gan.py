"""A GAN as DCGAN's example writes it: D and G steps each iteration, and a sample from fixed
noise under grad every iteration (never backwarded)."""
import os

import torch
import torch.nn as nn

NO_GRAD_FROM = int(os.environ.get("NO_GRAD_FROM", "-1"))  # the edits: the sample under no_grad,
EVAL_FROM = int(os.environ.get("EVAL_FROM", "-1"))  # and in eval mode, from an iteration on

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 16))
netD = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
criterion = nn.BCEWithLogitsLoss()
optD = torch.optim.Adam(netD.parameters(), lr=2e-3)
optG = torch.optim.Adam(netG.parameters(), lr=2e-3)
gen = torch.Generator().manual_seed(4)
fixed_noise = torch.randn(24, 8, generator=gen)
for step in range(int(os.environ.get("STEPS", "8"))):
    real = torch.randn(16, 16, generator=gen) + 2
    noise = torch.randn(16, 8, generator=gen)
    netD.zero_grad()
    errD_real = criterion(netD(real), torch.ones(16, 1))
    errD_real.backward()
    fake = netG(noise)
    errD_fake = criterion(netD(fake.detach()), torch.zeros(16, 1))
    errD_fake.backward()
    optD.step()
    netG.zero_grad()
    errG = criterion(netD(fake), torch.ones(16, 1))
    errG.backward()
    optG.step()
    if 0 <= EVAL_FROM <= step:
        netG.eval()
    if 0 <= NO_GRAD_FROM <= step:
        with torch.no_grad():
            sample = netG(fixed_noise)
    else:
        sample = netG(fixed_noise)
    netG.train()
    print(f"step {step} errD {(errD_real + errD_fake).item()!r} errG {errG.item()!r} "
          f"sample {sample.mean().item()!r}", flush=True)
