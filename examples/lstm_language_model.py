"""memlens example: a word-level LSTM language model that carries its hidden state.

Run it: python main.py run --preset examples/lstm_language_model.py --steps 50
         ... --at 10:detach_state=false   (the classic truncated-BPTT mistake)
The text is a seeded Markov chain over a small vocabulary, split into `batch_size` parallel
streams read window by window, as PyTorch's word_language_model example does. init_state()
makes memlens carry (h, c) from one batch to the next; detach_state decides whether the
next batch's backward stops at the batch boundary.
"""

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, EMBED, HIDDEN = 200, 32, 64
SEQ_LEN, WINDOWS = 12, 64  # tokens per window; windows per stream before the text repeats

CONFIG = {"batch_size": 8, "lr": 3e-3, "optimizer": "adam", "eval_every": 10}


def _text(streams: int, length: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, VOCAB, (VOCAB, 3), generator=gen)  # 3 likely next words
    pick = torch.randint(0, 3, (streams, length), generator=gen)
    tokens = torch.empty(streams, length, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, VOCAB, (streams,), generator=gen)
    for t in range(1, length):
        tokens[:, t] = successors[tokens[:, t - 1], pick[:, t]]
    return tokens


_cache: dict = {}


def _streams(batch_size: int, split: str) -> torch.Tensor:
    key = (batch_size, split)
    if key not in _cache:
        _cache[key] = _text(batch_size, SEQ_LEN * WINDOWS + 1, 0 if split == "train" else 1)
    return _cache[key]


class WordLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.LSTM(EMBED, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens, state):
        out, state = self.rnn(self.embed(tokens), state)
        return self.head(out), state


def build_model() -> nn.Module:
    return WordLSTM()


def init_state(batch_size: int):
    return torch.zeros(1, batch_size, HIDDEN), torch.zeros(1, batch_size, HIDDEN)


def make_batch(step: int, split: str, batch_size: int = 8):
    text = _streams(batch_size, split)
    w = (step % WINDOWS) * SEQ_LEN if split == "train" else 0
    window = text[:, w: w + SEQ_LEN + 1]
    return window[:, :-1].clone(), window[:, 1:].clone()


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
