"""Every setting a run takes, with its type, valid values and whether it can change live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A bad setting: the message names the key, the bad value and what would be valid."""


@dataclass(frozen=True, slots=True)
class Option:
    key: str
    kind: type  # bool, int, float or str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    live: bool = False  # a technique: may change while the loop runs

    def valid_text(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        lo = "" if self.minimum is None else f" >= {self.minimum:g}"
        hi = "" if self.maximum is None else f" <= {self.maximum:g}"
        kind = {int: "a whole number", float: "a number"}.get(self.kind, "text")
        return f"{kind}{lo}{' and' if lo and hi else ''}{hi}"

    def parse(self, value: Any) -> Any:
        """Turn a TOML value or a command-line string into a checked value of this option."""
        bad = ConfigError(f"{self.key}: {value!r} is not valid; use {self.valid_text()}")
        if self.kind is bool:
            if isinstance(value, bool):
                out = value
            elif isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                out = value.strip().lower() in _TRUE
            else:
                raise bad
        elif self.kind is int:
            if isinstance(value, bool):
                raise bad
            try:
                out = int(value) if not isinstance(value, float) else None
            except (TypeError, ValueError):
                out = None
            if out is None:
                raise bad
        elif self.kind is float:
            if isinstance(value, bool):
                raise bad
            try:
                out = float(value)
            except (TypeError, ValueError):
                raise bad from None
            if out != out or out in (float("inf"), float("-inf")):
                raise bad
        else:
            if not isinstance(value, str):
                raise bad
            out = value.strip().lower()
            if self.choices and out not in self.choices:
                raise bad
        if self.minimum is not None and out < self.minimum:
            raise bad
        if self.maximum is not None and out > self.maximum:
            raise bad
        return out


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

PRESETS = ("mlp", "cnn", "lstm", "gan", "transformer")

RUN_OPTIONS: tuple[Option, ...] = (
    Option("preset", str, "mlp", "which model and data to train", choices=PRESETS),
    Option("steps", int, 200, "training steps (micro-batches) to run", minimum=1),
    Option("batch_size", int, 0, "samples per micro-batch; 0 = the preset's default",
           minimum=0, maximum=65536),
    Option("width", int, 0, "hidden width; 0 = the preset's default", minimum=0, maximum=65536),
    Option("seq_len", int, 0, "sequence length (lstm, transformer); 0 = the preset's default",
           minimum=0, maximum=4096),
    Option("optimizer", str, "adam",
           "sgd: plain SGD (no state); momentum: SGD with momentum 0.9; adam; adamw",
           choices=("sgd", "momentum", "adam", "adamw")),
    Option("lr", float, 1e-3, "learning rate", minimum=0.0, maximum=100.0),
    Option("device", str, "auto", "where to train", choices=("auto", "cpu", "cuda")),
    Option("seed", int, 0, "random seed for model and data", minimum=0),
    Option("eval_every", int, 10, "run an eval phase every N steps; 0 = never", minimum=0),
    Option("precise", bool, False, "track every storage (exact in-step peak; slower)"),
    Option("lstm_cell", bool, False, "lstm: unroll an LSTMCell in Python (a large graph)"),
    Option("capture_every", int, 0, "capture the autograd graph every N steps; 0 = on request",
           minimum=0),
    Option("cuda_snapshot_start", int, 0,
           "CUDA: first step recorded by PyTorch's allocator history (cuda_snapshot.pickle)",
           minimum=0),
    Option("cuda_snapshot_steps", int, 0,
           "CUDA: steps the allocator history records from its start; 0 = off", minimum=0,
           maximum=10_000),
)  # fmt: skip

TECHNIQUE_OPTIONS: tuple[Option, ...] = (
    Option("zero_grad", str, "set_to_none", "how gradients are cleared before backward",
           choices=("set_to_none", "zeros", "off"), live=True),
    Option("accumulate", int, 1, "micro-batches per optimizer step (loss / k)",
           minimum=1, maximum=1024, live=True),
    Option("detach_state", bool, True,
           "detach carried state (lstm hidden state; gan generator output in the D step)",
           live=True),
    Option("retain_graph", bool, False, "backward(retain_graph=True): keep the graph alive",
           live=True),
    Option("no_grad_eval", bool, True, "run the eval phase under torch.no_grad()", live=True),
    Option("eval_mode", bool, True, "model.eval() during the eval phase", live=True),
    Option("amp", str, "off", "autocast: bf16, or fp16 with GradScaler",
           choices=("off", "bf16", "fp16"), live=True),
    Option("leak_loss_sum", bool, False, "bug: total_loss += loss instead of loss.item()",
           live=True),
    Option("leak_cache", bool, False, "bug: the loss keeps its intermediates in a list",
           live=True),
)  # fmt: skip

OPTIONS: dict[str, Option] = {o.key: o for o in RUN_OPTIONS + TECHNIQUE_OPTIONS}
TECHNIQUE_KEYS: tuple[str, ...] = tuple(o.key for o in TECHNIQUE_OPTIONS)


def option(key: str) -> Option:
    try:
        return OPTIONS[key]
    except KeyError:
        raise ConfigError(
            f"unknown setting {key!r}; valid settings: {', '.join(OPTIONS)}"
        ) from None
