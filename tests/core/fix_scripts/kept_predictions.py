"""A classifier checked on a validation batch every other step, its predictions kept for an
accuracy at the end, and the running loss summed for the log: written as users write it,
with two bugs `main.py fix` fixes (tests/core/test_fix.py): the validation runs under grad,
so each kept prediction holds its graph, and `running_loss += loss` keeps every step's."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def make_model():
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def validate(model, x_val, predictions):
    model.eval()
    predictions.append(model(x_val))  # kept for the accuracy at the end
    model.train()


def train(steps):
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x_val, y_val = torch.randn(256, 16), torch.randint(0, 4, (256,))
    predictions = []
    running_loss = 0.0
    for step in range(steps):
        if step % 2 == 0:
            validate(model, x_val, predictions)
        x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        running_loss += loss
        print(f"step {step} mean loss so far {running_loss / (step + 1):.4f}")
    accuracy = torch.stack([(p.argmax(1) == y_val).float().mean() for p in predictions])
    print(f"validation accuracy {accuracy.mean():.3f}")
    return predictions


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    train(parser.parse_args().steps)
