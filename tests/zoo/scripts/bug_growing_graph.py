"""BUG: word_language_model's hand-written SGD (`p.data.add_`: no version bump, so autograd
never complains) with the hidden state carried without detach and `backward(retain_graph=
True)` "to make the error go away": nothing fails, but each backward runs through every
earlier batch's graph again; nodes, kept bytes and backward's time grow every batch. (The
fix: `hidden = hidden.detach()` each batch, and no retain_graph.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--lr", type=float, default=0.5)
args = parser.parse_args()
torch.manual_seed(0)


class RNNModel(nn.Module):
    def __init__(self, ntoken=50, ninp=16, nhid=32):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, inp, hidden):
        output, hidden = self.rnn(self.encoder(inp), hidden)
        return self.decoder(output), hidden


bptt, batch = 6, 4
model = RNNModel()
zoo_truth.track(model)
corpus = torch.randint(0, 50, (bptt * args.steps + 1, batch))  # (seq, batch): sequence first
hidden = (torch.zeros(1, batch, 32), torch.zeros(1, batch, 32))
for step in range(args.steps):
    data = corpus[step * bptt:(step + 1) * bptt]
    targets = corpus[step * bptt + 1:(step + 1) * bptt + 1].reshape(-1)
    model.zero_grad()
    output, hidden = model(data, hidden)  # BUG: the hidden state keeps every batch's graph
    loss = F.cross_entropy(output.view(-1, 50), targets)
    loss.backward(retain_graph=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-args.lr)
    zoo_truth.count_step()
    print(f"step {step} loss {loss.item():.4f}")
zoo_truth.final(loss, model)
