"""Every setting a run takes, with its type, valid values and whether it can change live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memlens.core.excerpt import excerpt


class ConfigError(ValueError):
    """A bad setting: the message names the key, the bad value and what would be valid."""


def shown(value: Any) -> str:
    """A value as a message quotes it: its repr, cut to a short excerpt (a settings file's
    50 MB value is never echoed whole)."""
    return excerpt(repr(value) if isinstance(value, str) else value)


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
    cuda_only: bool = False  # has an effect only when the run trains on CUDA

    def format(self, value: Any) -> str:
        """A value as the command line and TOML files spell it (true, not True)."""
        return format_value(value)

    def default_text(self) -> str:
        """The default in the user's words: a 0 that means "default" or "never" says so."""
        _, sep, meaning = self.help.partition("0 = ")
        if sep and self.default == 0:
            return f"0 ({meaning.split(';')[0]})"
        return self.format(self.default)

    def valid_text(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        lo = "" if self.minimum is None else f" >= {self._number(self.minimum)}"
        hi = "" if self.maximum is None else f" <= {self._number(self.maximum)}"
        kind = {int: "a whole number", float: "a number"}.get(self.kind, "text")
        return f"{kind}{lo}{' and' if lo and hi else ''}{hi}"

    def _number(self, bound: float) -> str:
        # An int bound in full (a seed's 2**64 - 1 would read 1.84467e+19 in %g)
        return f"{int(bound):,}".replace(",", "_") if self.kind is int else f"{bound:g}"

    def parse(self, value: Any) -> Any:
        """Turn a TOML value or a command-line string into a checked value of this option."""
        bad = ConfigError(f"{self.key}: {shown(value)} is not valid; use {self.valid_text()}")
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


class PresetOption(Option):
    """The preset setting: a built-in preset's name, or the path of a model file.

    Only the form is checked here (a saved run whose model file has moved still loads);
    memlens.core.model_file.resolve_preset checks that the file is there before a run.
    """

    def valid_text(self) -> str:
        return super().valid_text() + ", or the path of a .py model file"

    def parse(self, value: Any) -> Any:
        if isinstance(value, str) and is_model_file(value):
            return value.strip()
        try:
            return super().parse(value)
        except ConfigError:
            raise ConfigError(f"{self.key}: {shown(value)} is not valid; use {self.valid_text()}"
                              ) from None


def is_model_file(preset: str) -> bool:
    """A preset value that names a file (a path or a name with a suffix), not a built-in."""
    text = preset.strip()
    if text.lower() in PRESETS:
        return False
    return "/" in text or "\\" in text or "." in text.lstrip(".")


def format_value(value: Any) -> str:
    """One spelling for a setting's value wherever it is shown: true/false, 0.001, set_to_none."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

PRESETS = ("mlp", "cnn", "lstm", "gan", "transformer")
# The longest run a setting may ask for, and so the bound on every setting counted in steps:
# an unbounded count overflows the C integers torch and the loop's buffers take.
MAX_STEPS = 100_000_000
MAX_SEED = 2**64 - 1  # torch.manual_seed's range

RUN_OPTIONS: tuple[Option, ...] = (
    PresetOption("preset", str, "mlp", "which model and data to train", choices=PRESETS),
    Option("steps", int, 200, "training steps (micro-batches) to run", minimum=1,
           maximum=MAX_STEPS),
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
    Option("seed", int, 0, "random seed for model and data", minimum=0, maximum=MAX_SEED),
    Option("eval_every", int, 10, "run an eval phase every N steps; 0 = never", minimum=0,
           maximum=MAX_STEPS),
    Option("threads", int, 0,
           "torch CPU threads for the run; 0 = torch's default (one per core; on a shared "
           "machine fewer are often faster)", minimum=0, maximum=1024),
    Option("precise", bool, False, "track every storage (exact in-step peak; slower)"),
    Option("lstm_cell", bool, False, "lstm: unroll an LSTMCell in Python (a large graph)"),
    Option("capture_every", int, 0, "capture the autograd graph every N steps; 0 = on request",
           minimum=0, maximum=MAX_STEPS),
    Option("cuda_snapshot_start", int, 0,
           "CUDA: first step recorded by PyTorch's allocator history (cuda_snapshot.pickle)",
           minimum=0, maximum=MAX_STEPS, cuda_only=True),
    Option("cuda_snapshot_steps", int, 0,
           "CUDA: steps the allocator history records from its start; 0 = off", minimum=0,
           maximum=10_000, cuda_only=True),
    Option("force", bool, False,
           "start even when the memory check says model, optimizer and a batch will not fit"),
)

TECHNIQUE_OPTIONS: tuple[Option, ...] = (
    Option("zero_grad", str, "set_to_none", "how gradients are cleared before backward",
           choices=("set_to_none", "zeros", "off"), live=True),
    Option("accumulate", int, 1, "micro-batches per optimizer step (loss / k)",
           minimum=1, maximum=1024, live=True),
    Option("detach_state", bool, True,
           "detach carried state (lstm hidden state; gan generator output in the D step; "
           "a model file's init_state state)",
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
)

OPTIONS: dict[str, Option] = {o.key: o for o in RUN_OPTIONS + TECHNIQUE_OPTIONS}
TECHNIQUE_KEYS: tuple[str, ...] = tuple(o.key for o in TECHNIQUE_OPTIONS)


def option(key: str) -> Option:
    try:
        return OPTIONS[key]
    except KeyError:
        raise ConfigError(
            f"unknown setting {shown(key)}; valid settings: {', '.join(OPTIONS)}"
        ) from None


def settings_help() -> str:
    """Every setting with its valid values and default, for `--help` (from this table)."""
    def rows(options: tuple[Option, ...]) -> list[str]:
        width = max(len(o.key) for o in RUN_OPTIONS + TECHNIQUE_OPTIONS)
        return [f"  {o.key:<{width}}  {o.valid_text()}; default {o.default_text()}"
                + ("; CUDA only" if o.cuda_only else "") for o in options]

    return "\n".join(["settings (--set KEY=VALUE, or a --config TOML file):",
                      *rows(RUN_OPTIONS), "",
                      "techniques (also live: --at STEP:KEY=VALUE):",
                      *rows(TECHNIQUE_OPTIONS)])
