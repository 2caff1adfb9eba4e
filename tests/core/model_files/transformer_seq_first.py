"""A language model on nn.TransformerEncoder with batch_first=False (the default): inputs
(seq_len, batch); make_batch follows the batch_size setting."""

import torch
from torch import nn

VOCAB, D, SEQ_LEN = 40, 32, 12
CONFIG = {"batch_size": 5}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        layer = nn.TransformerEncoderLayer(D, 4, 2 * D, dropout=0.1)  # batch_first=False
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ_LEN))

    def forward(self, x):
        return self.head(self.encoder(self.embed(x), mask=self.mask, is_causal=True))


def build_model():
    return Encoder()


def make_batch(step, split, batch_size=5):
    g = torch.Generator().manual_seed(step * 2 + (split == "eval"))
    tokens = torch.randint(0, VOCAB, (SEQ_LEN + 1, batch_size), generator=g)
    return tokens[:-1], tokens[1:]
