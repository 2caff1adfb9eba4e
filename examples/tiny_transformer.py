"""memlens example: a tiny causal transformer language model on synthetic token sequences.

Run it: python main.py run --preset examples/tiny_transformer.py --steps 50 --set amp=bf16
Each sequence counts up from a random start modulo the vocabulary with an occasional jump:
a pattern a two-layer transformer picks up within a few dozen steps.
"""

import torch
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS, SEQ_LEN = 64, 32, 4, 2, 16

CONFIG = {"batch_size": 8, "lr": 1e-3, "optimizer": "adamw", "eval_every": 10}


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(0.02 * torch.randn(SEQ_LEN, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.1,
                                           batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)
        mask = nn.Transformer.generate_square_subsequent_mask(SEQ_LEN)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens):
        n = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:n]
        return self.head(self.blocks(h, mask=self.mask[:n, :n], is_causal=True))


def build_model() -> nn.Module:
    return TinyTransformer()


def make_batch(step: int, split: str, batch_size: int = 8):
    gen = torch.Generator().manual_seed(step if split == "train" else 1_000_000 + step)
    start = torch.randint(0, VOCAB, (batch_size, 1), generator=gen)
    jumps = (torch.rand(batch_size, SEQ_LEN + 1, generator=gen) < 0.05).long().cumsum(1) * 7
    seq = (start + torch.arange(SEQ_LEN + 1) + jumps) % VOCAB
    return seq[:, :-1], seq[:, 1:]
