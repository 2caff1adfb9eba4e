"""BUG: an RNN's hidden state carried from batch to batch without detach: the second
backward reaches the first batch's graph, already freed, and raises "Trying to backward
through the graph a second time". (The fix: `hidden = hidden.detach()` each batch.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
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
    logits, hidden = model(x, hidden)  # BUG: no hidden.detach()
    loss = F.cross_entropy(logits.reshape(-1, 40), y.reshape(-1))
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
zoo_truth.final(loss, model)
