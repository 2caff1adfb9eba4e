"""A classifier trained, then a saliency map of one input: the gradient of a class score
with respect to the image (torch.autograd.grad after the last optimizer step), as
interpretability tutorials write it. It trains nothing: no step of its own."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)

model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                      nn.Linear(8 * 8 * 8, 10))
zoo_truth.track(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
images, labels = torch.randn(64, 1, 8, 8), torch.randint(0, 10, (64,))

for step in range(args.steps):
    batch = slice(step * 8 % 64, step * 8 % 64 + 8)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images[batch]), labels[batch])
    loss.backward()
    optimizer.step()

model.eval()
image = images[:1].clone().requires_grad_(True)
score = model(image)[0, labels[0]]
saliency, = torch.autograd.grad(score, image)
print(f"saliency {saliency.abs().amax().item():.4f} for a score of {score.item():.4f}")
zoo_truth.final(loss, model)
