"""A GRU language model in PyTorch's default layout: inputs (seq_len, batch), written as a
new user writes one (make_batch without batch_size, the size in CONFIG)."""

import torch
from torch import nn

VOCAB, EMBED, HIDDEN, SEQ_LEN, BATCH = 50, 24, 48, 10, 8
CONFIG = {"batch_size": 8}


class GRULM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.GRU(EMBED, HIDDEN)  # batch_first=False: (seq_len, batch, features)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, h):
        out, h = self.rnn(self.embed(x), h)
        return self.head(out), h


def build_model():
    return GRULM()


def make_batch(step, split):
    g = torch.Generator().manual_seed(step * 2 + (split == "eval"))
    tokens = torch.randint(0, VOCAB, (SEQ_LEN + 1, BATCH), generator=g)
    return tokens[:-1], tokens[1:]


def init_state(batch_size):
    return torch.zeros(1, batch_size, HIDDEN)
