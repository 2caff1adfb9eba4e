"""An LSTM language model with batch_first=True: inputs (batch, seq_len); make_batch follows
the batch_size setting."""

import torch
from torch import nn

VOCAB, EMBED, HIDDEN, SEQ_LEN = 50, 24, 32, 10
CONFIG = {"batch_size": 6}


class LSTMLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.LSTM(EMBED, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, state):
        out, state = self.rnn(self.embed(x), state)
        return self.head(out), state


def build_model():
    return LSTMLM()


def make_batch(step, split, batch_size=6):
    g = torch.Generator().manual_seed(step * 2 + (split == "eval"))
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ_LEN + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def init_state(batch_size):
    return torch.zeros(1, batch_size, HIDDEN), torch.zeros(1, batch_size, HIDDEN)
