"""An RNN carrying its hidden state from batch to batch without detach(), with the usual
"fix" for the second backward's error, retain_graph=True, and word_language_model's
hand-written update (p.data.add_: no in-place error): the graph grows every step."""
import os

import torch
import torch.nn as nn

DETACH_FROM = int(os.environ.get("DETACH_FROM", "-1"))  # the edit: hidden.detach() from here


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(8, 24)
        self.head = nn.Linear(24, 1)

    def forward(self, x, hidden):
        out, hidden = self.rnn(x, hidden)
        return self.head(out), hidden


torch.manual_seed(0)
model = Model()
gen = torch.Generator().manual_seed(2)
hidden = torch.zeros(1, 4, 24)
for step in range(int(os.environ.get("STEPS", "8"))):
    x, y = torch.randn(5, 4, 8, generator=gen), torch.randn(5, 4, 1, generator=gen)
    if 0 <= DETACH_FROM <= step:
        hidden = hidden.detach()
    model.zero_grad()
    pred, hidden = model(x, hidden)
    loss = ((pred - y) ** 2).mean()
    loss.backward(retain_graph=True)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.01)
    print(f"step {step} loss {loss.item()!r}", flush=True)
