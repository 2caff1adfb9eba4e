"""BUG: an RNN's hidden state carried from batch to batch without detach, and the "fix"
often found for the second-backward error, `loss.backward(retain_graph=True)`: each backward
runs through every earlier batch again; the first optimizer step changed the weights those
batches saved, so the second backward raises autograd's "modified by an inplace operation"
error. (The fix: `hidden = hidden.detach()` each batch, and no retain_graph.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)


class CharRNN(nn.Module):
    def __init__(self, vocab=40, hidden=48):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.rnn = nn.GRU(16, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x, h):
        y, h = self.rnn(self.embed(x), h)
        return self.out(y), h


model = CharRNN()
zoo_truth.track(model)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
text = torch.randint(0, 40, (8, 10 * args.steps + 1))
hidden = torch.zeros(1, 8, 48)

for step in range(args.steps):
    x = text[:, step * 10:(step + 1) * 10]
    y = text[:, step * 10 + 1:(step + 1) * 10 + 1]
    optimizer.zero_grad()
    logits, hidden = model(x, hidden)  # BUG: hidden still carries the earlier batches' graph
    loss = F.cross_entropy(logits.reshape(-1, 40), y.reshape(-1))
    loss.backward(retain_graph=True)
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
zoo_truth.final(loss, model)
