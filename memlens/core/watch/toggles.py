"""The techniques a watch can toggle on a user's own script: which keys, which values, what
each does to the script's results (the one text the CLI, run.json's toggle events and the
app's tooltips use), and `--at STEP:KEY=VALUE` as a watch reads it.

The lab's keys and values (core/options.py), five of them, and one more value: `script`,
the state as the script wrote it (no override; the default). For the keys whose off value
is "do nothing" (detach_state=false, no_grad_eval=false, eval_mode=false, amp=off) that
value is the script's own too: memlens never undoes what the script does itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memlens.core.options import ConfigError, format_value, option

WATCH_KEYS: tuple[str, ...] = ("zero_grad", "detach_state", "no_grad_eval", "eval_mode", "amp")
SCRIPT = "script"  # the value that means: as the script wrote it (no override)
# The value of each key that overrides nothing (zero_grad's `off` skips the calls: an
# override of its own).
NEUTRAL: dict[str, Any] = {"detach_state": False, "no_grad_eval": False, "eval_mode": False,
                            "amp": "off"}

# What each override does to the script's results, in one line (the toggle event's message,
# so the effect text says it, and the app's tooltip).
RESULTS: dict[tuple[str, Any], str] = {
    ("zero_grad", "set_to_none"): (
        "results unchanged where every parameter gets a gradient each step (one that gets "
        "none is skipped by the optimizer instead of stepped with a zero gradient)"),
    ("zero_grad", "zeros"): (
        "results unchanged where every parameter gets a gradient each step (one that gets "
        "none is stepped with a zero gradient instead of skipped)"),
    ("zero_grad", "off"): (
        "results change: gradients add up across steps, as when zero_grad is forgotten"),
    ("detach_state", True): (
        "results change as detach() does: gradients stop at the step boundary (truncated "
        "backpropagation through time)"),
    ("no_grad_eval", True): "results unchanged: the same outputs, without their graph",
    ("eval_mode", True): (
        "results change as model.eval() does: no Dropout, BatchNorm's running statistics "
        "used (and not updated) in those forwards"),
    ("amp", "bf16"): "results change by AMP numerics: bf16 forwards, losses differ in low "
                     "digits",
    ("amp", "fp16"): "results change by AMP numerics: fp16 forwards (a GradScaler on CUDA; "
                     "none on CPU), losses differ in low digits",
}
SCRIPT_RESULTS = "results as the script wrote them"

# What an override acts on, for a tooltip: the lab's TECHNIQUE_NOTES say what the technique
# is; these say what memlens does to a watched script.
WATCH_NOTES: dict[str, str] = {
    "zero_grad": "The script's own zero_grad calls (optimizer or module) run with "
                 "set_to_none forced (set_to_none, zeros), or are skipped (off).",
    "detach_state": "A tensor a model is given that carries an earlier step's graph (an "
                    "RNN's hidden state) is detached at the call.",
    "no_grad_eval": "Forwards from call sites whose outputs no backward ever reached (a "
                    "validation pass, a sample) run under torch.no_grad().",
    "eval_mode": "Those forwards run with the model in eval mode, put back as it was "
                 "after the call.",
    "amp": "The models' forwards, and the loss computed from them in the step, run under "
           "torch.autocast (fp16: a GradScaler around backward and the optimizer step on "
           "CUDA; on CPU fp16 runs as CPU autocast, without a scaler).",
}


def results_text(key: str, value: Any) -> str:
    return RESULTS.get((key, value), SCRIPT_RESULTS)


def is_override(key: str, value: Any) -> bool:
    """Whether `value` changes what the script does (else it is the script's own)."""
    return value != SCRIPT and NEUTRAL.get(key, SCRIPT) != value


def parse_value(key: str, raw: Any) -> Any:
    """A watch toggle's value: `script`, or one of the lab's values for `key`."""
    if key not in WATCH_KEYS:
        raise ConfigError(f"{key!r} cannot be toggled on a watched script; watch toggles: "
                          f"{', '.join(WATCH_KEYS)}")
    if isinstance(raw, str) and raw.strip().lower() == SCRIPT:
        return SCRIPT
    try:
        return option(key).parse(raw)
    except ConfigError:
        raise ConfigError(f"{key}: {raw!r} is not valid; use {option(key).valid_text()}, or "
                          f"{SCRIPT} (as the script wrote it)") from None


@dataclass(frozen=True, slots=True)
class WatchChange:
    """`--at STEP:KEY=VALUE` on a watched script: applied at the first step boundary at or
    after STEP."""

    step: int
    key: str
    value: Any

    @classmethod
    def parse(cls, text: str) -> WatchChange:
        head, sep, assignment = str(text).partition(":")
        if not sep or "=" not in assignment:
            raise ConfigError(f"--at {text!r}: expected STEP:KEY=VALUE, e.g. 5:amp=bf16")
        try:
            step = int(head.replace("_", ""))
        except ValueError:
            raise ConfigError(f"--at {text!r}: {head!r} is not a step number") from None
        if step < 0:
            raise ConfigError(f"--at {text!r}: the step must be >= 0")
        key, _, raw = assignment.partition("=")
        try:
            return cls(step, key.strip(), parse_value(key.strip(), raw))
        except ConfigError as exc:
            raise ConfigError(f"--at {text!r}: {exc}") from None

    def text(self) -> str:
        return f"{self.step}:{self.key}={format_value(self.value)}"


def parse_changes(texts) -> tuple[WatchChange, ...]:
    """`at=[...]` of memlens.watch or a callback: texts (or WatchChanges), checked now."""
    if isinstance(texts, str):
        texts = [texts]
    return tuple(sorted((t if isinstance(t, WatchChange) else WatchChange.parse(t)
                         for t in texts or ()), key=lambda c: c.step))
