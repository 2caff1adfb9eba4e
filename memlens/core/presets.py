"""Training presets: a model, its optimizer(s) and seeded synthetic data, built in memory.

A preset knows how to run one micro-batch forward (returning the losses to backward) and one
eval forward; the loop around it (memlens.core.loop) owns phases, techniques and measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memlens.core.config import RunConfig, TechniqueToggles

DATA_BATCHES = 16  # distinct training batches, cycled; eval uses one more held-out batch


@dataclass
class ForwardResult:
    """What a training forward produced: losses to backward, the loss to report."""

    # The loss the loop reports; None: the backward losses' values summed, as a plain loop
    # with two losses reports them (`d_loss.item() + g_loss.item()`: no tensor, no node).
    report_loss: Tensor | None
    # (loss, inputs): backward(loss, inputs=inputs); inputs None means all leaves.
    backward: list[tuple[Tensor, list[Tensor] | None]]
    intermediates: list[Tensor] = field(default_factory=list)  # what leak_cache keeps (when on)
    # What a plain loop keeps bound besides its losses (`logits = model(x)`), until the next
    # step's forward rebinds the names: the loop holds them as long.
    outputs: list[Tensor] = field(default_factory=list)

    def value(self) -> float:
        """The reported loss as a number."""
        if self.report_loss is not None:
            return self.report_loss.item()
        return sum(loss.item() for loss, _ in self.backward)

    def graph_roots(self) -> Tensor | tuple[Tensor, ...]:
        """Where the step's graph is walked from: the reported loss, or every backward loss."""
        if self.report_loss is not None:
            return self.report_loss
        return tuple(loss for loss, _ in self.backward)

    def summed(self) -> Tensor:
        """What `total_loss += loss` adds: the reported loss, or the backward losses summed
        with their graphs (the buggy `total_loss += d_loss + g_loss` makes that node)."""
        if self.report_loss is not None:
            return self.report_loss
        total = self.backward[0][0]
        for loss, _ in self.backward[1:]:
            total = total + loss
        return total


class Preset:
    """Base: subclasses set models/defaults and implement forward_train / forward_eval."""

    name = "base"
    defaults: dict[str, int] = {}

    def __init__(self, config: RunConfig, device: torch.device) -> None:
        self.config = config
        self.device = device
        self.batch_size = config.batch_size or self.defaults["batch_size"]
        self.width = config.width or self.defaults["width"]
        self.seq_len = config.seq_len or self.defaults.get("seq_len", 0)
        self.gen = torch.Generator(device="cpu").manual_seed(config.seed)
        self.models: dict[str, nn.Module] = {}
        self.optimizers: list[torch.optim.Optimizer] = []
        self.step_index = 0
        # Leak simulators' holders: exactly what the buggy code in the article would keep.
        self.total_loss: Any = 0.0
        self.total_eval_loss: Any = 0.0
        self.cache: list[Tensor] = []

    # --- helpers --------------------------------------------------------------------------
    def _make_optimizer(self, params) -> torch.optim.Optimizer:
        kind, lr = self.config.optimizer, self.config.lr
        if kind == "sgd":
            return torch.optim.SGD(params, lr=lr)
        if kind == "momentum":
            return torch.optim.SGD(params, lr=lr, momentum=0.9)
        if kind == "adamw":
            return torch.optim.AdamW(params, lr=lr)
        return torch.optim.Adam(params, lr=lr)

    def _finish_build(self) -> None:
        for m in self.models.values():
            m.to(self.device).train()
        if not self.optimizers:
            params = [p for m in self.models.values() for p in m.parameters()]
            self.optimizers = [self._make_optimizer(params)]
        # The synthetic data set is made once and never replaced: carried_tensors() runs at
        # every phase edge and need not ask for it again.
        self._data = self.data_tensors()


    def named_parameters(self) -> dict[str, Tensor]:
        if len(self.models) == 1:
            (m,) = self.models.values()
            return dict(m.named_parameters())
        return {f"{k}.{n}": p for k, m in self.models.items() for n, p in m.named_parameters()}

    def parameters(self) -> list[Tensor]:
        return [p for m in self.models.values() for p in m.parameters()]

    def buffers(self) -> list[Tensor]:
        return [b for m in self.models.values() for b in m.buffers()]

    def data_tensors(self) -> list[Tensor]:
        return []

    def carried_tensors(self) -> list[Tensor]:
        """Tensors the loop keeps between steps besides params/grads/optimizer state."""
        out = self.cache + self._data
        if isinstance(self.total_loss, Tensor):
            out.append(self.total_loss)
        if isinstance(self.total_eval_loss, Tensor):
            out.append(self.total_eval_loss)
        return out

    def set_train(self, train: bool) -> None:
        for m in self.models.values():
            m.train(train)

    def on_toggle(self, key: str, old: Any, new: Any) -> None:
        """A fixed bug drops what the bug kept (as restarting with fixed code would)."""
        if key == "leak_loss_sum" and not new:
            self.total_loss = float(self.total_loss)
            self.total_eval_loss = float(self.total_eval_loss)
        if key == "leak_cache" and not new:
            self.cache = []

    def account_loss(self, loss: Tensor | None, toggles: TechniqueToggles, train: bool,
                     value: float | None = None) -> None:
        """Sum the loss for reporting, the right way (.item()) or the leaky way (+= loss).
        `value`, if given, is loss.item() already read (no second read of the tensor; then
        `loss` is needed only for the leak)."""
        if toggles.leak_loss_sum:
            value = loss
        elif value is None:
            value = loss.item()
        if train:
            self.total_loss += value
        else:
            self.total_eval_loss += value

    def recover(self) -> None:
        """After a failed step: drop state that refers to a broken graph."""

    # --- to implement ---------------------------------------------------------------------
    def forward_train(self, toggles: TechniqueToggles) -> ForwardResult:
        raise NotImplementedError

    def forward_eval(self, toggles: TechniqueToggles) -> Tensor:
        raise NotImplementedError


class _Classifier(Preset):
    """Shared by mlp and cnn: fixed synthetic batches of (x, y), cross-entropy."""

    classes = 10
    noise = 0.8  # how far samples scatter around their class template

    def _make_data(self, make_x) -> None:
        # Class-conditioned inputs so the loss really falls: x = template[y] + noise.
        self.templates = make_x(self.classes)
        ys = torch.randint(0, self.classes, (DATA_BATCHES + 1, self.batch_size), generator=self.gen)
        xs = self.templates[ys] + self.noise * torch.randn(
            (DATA_BATCHES + 1, self.batch_size, *self.templates.shape[1:]), generator=self.gen
        )
        self.xs, self.ys = xs.to(self.device), ys.to(self.device)

    def data_tensors(self) -> list[Tensor]:
        # The class templates the samples were drawn around stay held with them: data the
        # loop keeps (a precise run's allocator sees them; they were made before the run).
        return [self.xs, self.ys, self.templates]

    def _logits(self, x: Tensor) -> tuple[Tensor, Tensor]:
        model = self.models["model"]
        features = model[:-1](x)
        return model[-1](features), features

    def forward_train(self, toggles: TechniqueToggles) -> ForwardResult:
        i = self.step_index % DATA_BATCHES
        # A fresh batch tensor each step, as a DataLoader yields: a saved input then holds
        # this batch, not the whole synthetic dataset it was sliced from.
        logits, features = self._logits(self.xs[i].clone())
        loss = F.cross_entropy(logits, self.ys[i].clone())
        return ForwardResult(loss, [(loss, None)],
                             [features, logits] if toggles.leak_cache else [], [logits])

    def forward_eval(self, toggles: TechniqueToggles) -> Tensor:
        logits, _ = self._logits(self.xs[DATA_BATCHES].clone())
        return F.cross_entropy(logits, self.ys[DATA_BATCHES].clone())


class MlpPreset(_Classifier):
    name = "mlp"
    defaults = {"batch_size": 256, "width": 512}
    in_features = 256
    noise = 12.0

    def __init__(self, config: RunConfig, device: torch.device) -> None:
        super().__init__(config, device)
        w = self.width
        self.models["model"] = nn.Sequential(
            nn.Linear(self.in_features, w), nn.ReLU(),
            nn.Linear(w, w), nn.ReLU(),
            nn.Linear(w, w), nn.ReLU(),
            nn.Linear(w, self.classes),
        )
        self._make_data(lambda n: torch.randn(n, self.in_features, generator=self.gen))
        self._finish_build()


class CnnPreset(_Classifier):
    name = "cnn"
    defaults = {"batch_size": 32, "width": 32}

    def __init__(self, config: RunConfig, device: torch.device) -> None:
        super().__init__(config, device)
        w = self.width
        self.models["model"] = nn.Sequential(
            nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Dropout(0.25),
            nn.Linear(2 * w * 8 * 8, 128), nn.ReLU(),
            nn.Linear(128, self.classes),
        )
        self._make_data(lambda n: torch.randn(n, 3, 32, 32, generator=self.gen))
        self._finish_build()


class _TokenStream:
    """A seeded Markov chain over a vocabulary: text-like data a small LM can learn."""

    def __init__(self, vocab: int, length: int, gen: torch.Generator) -> None:
        if torch.get_default_device().type == "meta":  # memlens.core.preflight: shapes, no data
            self.tokens = torch.empty(length, dtype=torch.long)
            return
        nxt = torch.randint(0, vocab, (vocab, 4), generator=gen)  # each token: 4 likely successors
        choice = torch.randint(0, 4, (length,), generator=gen).tolist()
        noise = (torch.rand(length, generator=gen) < 0.1).tolist()
        rand_tok = torch.randint(0, vocab, (length,), generator=gen).tolist()
        table = nxt.tolist()
        out = [0] * length
        for i in range(1, length):  # plain ints: 20k steps take milliseconds
            out[i] = rand_tok[i] if noise[i] else table[out[i - 1]][choice[i]]
        self.tokens = torch.tensor(out, dtype=torch.long)


class LstmPreset(Preset):
    """Word-level LM with truncated BPTT: the hidden state is carried across batches."""

    name = "lstm"
    defaults = {"batch_size": 16, "width": 256, "seq_len": 35}
    vocab = 1000
    emb = 128

    def __init__(self, config: RunConfig, device: torch.device) -> None:
        super().__init__(config, device)
        self.use_cell = config.lstm_cell
        model = nn.ModuleDict({
            "embed": nn.Embedding(self.vocab, self.emb),
            "rnn": (nn.LSTMCell(self.emb, self.width) if self.use_cell
                    else nn.LSTM(self.emb, self.width, batch_first=True)),
            "head": nn.Linear(self.width, self.vocab),
        })
        self.models["model"] = model
        n = self.batch_size * self.seq_len * DATA_BATCHES + self.seq_len + 1
        # Batchify as word-language-model does: batch_size parallel streams, windows in order.
        stream = _TokenStream(self.vocab, n + self.batch_size * (self.seq_len + 1), self.gen)
        per = (len(stream.tokens) - 1) // self.batch_size
        self.data = stream.tokens[: per * self.batch_size + 1]
        self.streams = self.data[:-1].view(self.batch_size, per).to(self.device)
        self.targets = self.data[1:].view(self.batch_size, per).to(self.device)
        self.windows = (per - self.seq_len) // self.seq_len
        self.hidden: tuple[Tensor, Tensor] | None = None
        self._finish_build()

    def data_tensors(self) -> list[Tensor]:
        return [self.streams, self.targets]

    def carried_tensors(self) -> list[Tensor]:
        return super().carried_tensors() + list(self.hidden or ())

    def _zero_hidden(self) -> tuple[Tensor, Tensor]:
        shape = (self.batch_size, self.width) if self.use_cell else (1, self.batch_size, self.width)
        z = torch.zeros(shape, device=self.device)
        return z, z.clone()

    def _run(self, x: Tensor, hidden: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple]:
        model = self.models["model"]
        emb = model["embed"](x)
        if self.use_cell:
            h, c = hidden
            outs = []
            for t in range(emb.shape[1]):
                h, c = model["rnn"](emb[:, t], (h, c))
                outs.append(h)
            out, hidden = torch.stack(outs, dim=1), (h, c)
        elif self._fp16_on_cpu():
            # oneDNN has no fp16 LSTM on CPU ("could not create a primitive descriptor"):
            # the LSTM runs in float32 outside autocast, as a user must write it there;
            # the embedding and the head stay in fp16.
            with torch.autocast("cpu", enabled=False):
                out, hidden = model["rnn"](emb.float(), hidden)
        else:
            out, hidden = model["rnn"](emb, hidden)
        return model["head"](out), hidden

    def _fp16_on_cpu(self) -> bool:
        return (self.device.type == "cpu" and torch.is_autocast_enabled("cpu")
                and torch.get_autocast_dtype("cpu") == torch.float16)

    def forward_train(self, toggles: TechniqueToggles) -> ForwardResult:
        w = self.step_index % self.windows
        if w == 0 or self.hidden is None:
            self.hidden = self._zero_hidden()  # a new pass over the data starts fresh
        elif toggles.detach_state:
            self.hidden = tuple(h.detach() for h in self.hidden)
        # The state autocast left in bf16/fp16 goes back into the LSTM in its weights' dtype,
        # as a user switching AMP off writes it (autocast casts it down again where on).
        dtype = self.models["model"]["head"].weight.dtype
        if self.hidden[0].dtype != dtype:
            self.hidden = tuple(h.to(dtype) for h in self.hidden)
        s = slice(w * self.seq_len, (w + 1) * self.seq_len)
        logits, self.hidden = self._run(self.streams[:, s].clone(), self.hidden)
        target = self.targets[:, s].clone()
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), target.reshape(-1))
        return ForwardResult(loss, [(loss, None)], [logits] if toggles.leak_cache else [],
                             [logits])

    def forward_eval(self, toggles: TechniqueToggles) -> Tensor:
        s = slice(self.windows * self.seq_len, (self.windows + 1) * self.seq_len)
        logits, _ = self._run(self.streams[:, s].clone(), self._zero_hidden())
        target = self.targets[:, s].clone()
        return F.cross_entropy(logits.reshape(-1, self.vocab), target.reshape(-1))

    def recover(self) -> None:
        # The carried state points into a freed graph; the next step starts from zeros only
        # if the user turned detach back on (otherwise the error shows again, as it should).
        pass


class GanPreset(Preset):
    """A small GAN on a Gaussian mixture; D's step reads G's output (detach it or not)."""

    name = "gan"
    defaults = {"batch_size": 256, "width": 256}
    latent = 64
    features = 128

    def __init__(self, config: RunConfig, device: torch.device) -> None:
        super().__init__(config, device)
        w, f = self.width, self.features
        self.models["G"] = nn.Sequential(
            nn.Linear(self.latent, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, f)
        )
        self.models["D"] = nn.Sequential(
            nn.Linear(f, w), nn.LeakyReLU(0.2), nn.Linear(w, w), nn.LeakyReLU(0.2), nn.Linear(w, 1)
        )
        centres = 3.0 * torch.randn(8, f, generator=self.gen)
        pick = torch.randint(0, 8, (DATA_BATCHES + 1, self.batch_size), generator=self.gen)
        real = centres[pick] + 0.3 * torch.randn(
            DATA_BATCHES + 1, self.batch_size, f, generator=self.gen
        )
        self.real = real.to(self.device)
        self.z = torch.randn(DATA_BATCHES + 1, self.batch_size, self.latent,
                             generator=self.gen).to(self.device)
        self._finish_build()
        self.optimizers = [self._make_optimizer(self.models["G"].parameters()),
                           self._make_optimizer(self.models["D"].parameters())]

    def data_tensors(self) -> list[Tensor]:
        return [self.real, self.z]

    def _losses(self, i: int, detach: bool) -> tuple[Tensor, Tensor, Tensor]:
        G, D = self.models["G"], self.models["D"]
        fake = G(self.z[i].clone())
        real_logit = D(self.real[i].clone())
        fake_logit = D(fake.detach() if detach else fake)
        ones, zeros = torch.ones_like(real_logit), torch.zeros_like(real_logit)
        d_loss = (F.binary_cross_entropy_with_logits(real_logit, ones)
                  + F.binary_cross_entropy_with_logits(fake_logit, zeros))
        g_loss = F.binary_cross_entropy_with_logits(D(fake), ones)
        return d_loss, g_loss, fake

    def forward_train(self, toggles: TechniqueToggles) -> ForwardResult:
        d_loss, g_loss, fake = self._losses(self.step_index % DATA_BATCHES, toggles.detach_state)
        # D learns from d_loss; G only from g_loss (inputs= keeps G's loss out of D's grads).
        # Without detach, d_loss's backward runs through G as well, frees G's graph, and the
        # g_loss backward then needs it a second time.
        g_params = list(self.models["G"].parameters())
        # reported as a plain GAN loop reports it: the two values summed, no summed tensor
        return ForwardResult(None, [(d_loss, None), (g_loss, g_params)],
                             [fake] if toggles.leak_cache else [], [fake])

    def forward_eval(self, toggles: TechniqueToggles) -> Tensor:
        d_loss, g_loss, _ = self._losses(DATA_BATCHES, True)
        return d_loss + g_loss


class _CausalLM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(0.02 * torch.randn(seq_len, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len),
                             persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[1]
        h = self.embed(x) + self.pos[:n]
        h = self.blocks(h, mask=self.mask[:n, :n], is_causal=True)
        return self.head(h)


class TransformerPreset(Preset):
    name = "transformer"
    defaults = {"batch_size": 12, "width": 128, "seq_len": 48}
    vocab = 512

    def __init__(self, config: RunConfig, device: torch.device) -> None:
        super().__init__(config, device)
        self.models["model"] = _CausalLM(self.vocab, self.width, 2, 4, self.seq_len)
        need = (DATA_BATCHES + 1) * self.batch_size * (self.seq_len + 1)
        tokens = _TokenStream(self.vocab, need, self.gen).tokens
        chunks = tokens.view(DATA_BATCHES + 1, self.batch_size, self.seq_len + 1)
        self.chunks = chunks.to(self.device)
        self._finish_build()

    def data_tensors(self) -> list[Tensor]:
        return [self.chunks]

    def _loss(self, i: int) -> tuple[Tensor, Tensor]:
        chunk = self.chunks[i].clone()
        logits = self.models["model"](chunk[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), chunk[:, 1:].reshape(-1))
        return loss, logits

    def forward_train(self, toggles: TechniqueToggles) -> ForwardResult:
        loss, logits = self._loss(self.step_index % DATA_BATCHES)
        return ForwardResult(loss, [(loss, None)], [logits] if toggles.leak_cache else [],
                             [logits])

    def forward_eval(self, toggles: TechniqueToggles) -> Tensor:
        return self._loss(DATA_BATCHES)[0]


PRESET_CLASSES: dict[str, type[Preset]] = {
    cls.name: cls for cls in (MlpPreset, CnnPreset, LstmPreset, GanPreset, TransformerPreset)
}
