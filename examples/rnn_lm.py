"""A character-level LSTM language model, trained the way many scripts do it by hand:
truncated BPTT (the hidden state carried across batches, detached each batch), gradient
clipping, and a hand-written SGD update instead of an optimizer. Its sizes are those of
PyTorch's own word_language_model example (embedding and hidden 200, batch 20, BPTT 35).

Plain PyTorch, no memlens: record it with `python main.py watch examples/rnn_lm.py`.
Options: --steps N, --times FILE (each step's wall and thread CPU time in ms, one step a line),
--tiny (embedding 32, hidden 128, batch 16: a step of a few milliseconds), --micro (embedding
32, hidden 96, batch 8: a step of about 2 ms, the watch's target size).
"""

import argparse

import torch
from _timed_steps import timed_steps
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--times", help="write each step's time (ms) to this file")
parser.add_argument("--tiny", action="store_true", help="toy sizes: a step of a few ms")
parser.add_argument("--micro", action="store_true", help="smaller still: a step of about 2 ms")
args = parser.parse_args()
torch.manual_seed(0)

VOCAB, BPTT, LR, CLIP = 64, 35, 1.0, 0.25
EMBED, HIDDEN, BATCH = (32, 96, 8) if args.micro else (32, 128, 16) if args.tiny else (
    200, 200, 20)
text = torch.randint(0, VOCAB, (BATCH, 20_000))  # synthetic "text", one row per stream


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, hidden):
        out, hidden = self.lstm(self.embed(x), hidden)
        return self.head(out), hidden


model = CharLM()
hidden = (torch.zeros(1, BATCH, HIDDEN), torch.zeros(1, BATCH, HIDDEN))


def train_step(step):
    global hidden
    i = (step * BPTT) % (text.shape[1] - BPTT - 1)
    x, y = text[:, i:i + BPTT], text[:, i + 1:i + 1 + BPTT]
    hidden = tuple(h.detach() for h in hidden)  # truncated BPTT: cut the previous batch off
    model.zero_grad()
    logits, hidden = model(x, hidden)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    for p in model.parameters():  # plain SGD, by hand
        p.data.add_(p.grad, alpha=-LR)
    return loss


if __name__ == "__main__":
    timed_steps(train_step, args.steps, args.times,
                lambda step, loss: print(f"step {step}: loss {loss.item():.4f}"))
