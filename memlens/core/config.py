"""Typed, validated run configuration: defaults, TOML files, `key=value` overrides, `--at`."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from memlens.core.excerpt import excerpt
from memlens.core.options import (
    OPTIONS,
    RUN_OPTIONS,
    TECHNIQUE_KEYS,
    TECHNIQUE_OPTIONS,
    ConfigError,
    is_model_file,
    option,
    shown,
)
from memlens.core.safe_read import MAX_SETTINGS, FileReadError, read_text


def _default(key: str) -> Any:
    """Every default is declared once, in core/options.py's table."""
    return option(key).default


@dataclass(frozen=True, slots=True)
class TechniqueToggles:
    """The memory techniques in force for a step. Immutable: a change makes a new one."""

    zero_grad: str = _default("zero_grad")
    accumulate: int = _default("accumulate")
    detach_state: bool = _default("detach_state")
    retain_graph: bool = _default("retain_graph")
    no_grad_eval: bool = _default("no_grad_eval")
    eval_mode: bool = _default("eval_mode")
    amp: str = _default("amp")
    leak_loss_sum: bool = _default("leak_loss_sum")
    leak_cache: bool = _default("leak_cache")

    def with_change(self, key: str, value: Any) -> TechniqueToggles:
        if key not in TECHNIQUE_KEYS:
            raise ConfigError(
                f"{key!r} is not a technique; techniques: {', '.join(TECHNIQUE_KEYS)}"
            )
        return replace(self, **{key: option(key).parse(value)})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ScheduledChange:
    """`--at STEP:KEY=VALUE`: change a technique at a step boundary, as a live toggle would."""

    step: int
    key: str
    value: Any

    @classmethod
    def parse(cls, text: str) -> ScheduledChange:
        head, sep, assignment = text.partition(":")
        if not sep or "=" not in assignment:
            raise ConfigError(f"--at {shown(text)}: expected STEP:KEY=VALUE, e.g. "
                              "50:zero_grad=off")
        try:
            step = int(head)
        except ValueError:
            raise ConfigError(f"--at {shown(text)}: {shown(head)} is not a step "
                              "number") from None
        if step < 0:
            raise ConfigError(f"--at {shown(text)}: the step must be >= 0")
        key, _, raw = assignment.partition("=")
        key = key.strip()
        if key not in TECHNIQUE_KEYS:
            raise ConfigError(
                f"--at {shown(text)}: {shown(key)} cannot change during a run; "
                f"live techniques: {', '.join(TECHNIQUE_KEYS)}"
            )
        return cls(step, key, option(key).parse(raw))


@dataclass(frozen=True, slots=True)
class RunConfig:
    preset: str = _default("preset")
    steps: int = _default("steps")
    batch_size: int = _default("batch_size")
    width: int = _default("width")
    seq_len: int = _default("seq_len")
    optimizer: str = _default("optimizer")
    lr: float = _default("lr")
    device: str = _default("device")
    seed: int = _default("seed")
    eval_every: int = _default("eval_every")
    threads: int = _default("threads")
    precise: bool = _default("precise")
    lstm_cell: bool = _default("lstm_cell")
    capture_every: int = _default("capture_every")
    cuda_snapshot_start: int = _default("cuda_snapshot_start")
    cuda_snapshot_steps: int = _default("cuda_snapshot_steps")
    force: bool = _default("force")
    techniques: TechniqueToggles = field(default_factory=TechniqueToggles)
    schedule: tuple[ScheduledChange, ...] = ()

    # --- building -------------------------------------------------------------------------
    def with_values(self, values: dict[str, Any]) -> RunConfig:
        """Apply flat `{key: value}` overrides (run settings and techniques), checking each."""
        run: dict[str, Any] = {}
        tech = self.techniques
        for key, raw in values.items():
            opt = option(key)
            if opt.live:
                tech = tech.with_change(key, raw)
            else:
                run[key] = opt.parse(raw)
        return replace(self, techniques=tech, **run)

    def with_sets(self, assignments: list[str]) -> RunConfig:
        values: dict[str, Any] = {}
        for text in assignments:
            key, sep, raw = text.partition("=")
            if not sep:
                raise ConfigError(f"--set {shown(text)}: expected KEY=VALUE, e.g. batch_size=32")
            values[key.strip()] = raw
        return self.with_values(values)

    def with_schedule(self, changes: list[ScheduledChange]) -> RunConfig:
        return replace(self, schedule=tuple(sorted(self.schedule + tuple(changes),
                                                   key=lambda c: c.step)))

    @classmethod
    def from_toml(cls, path: str | Path, base: RunConfig | None = None) -> RunConfig:
        path = Path(path)
        try:
            data = tomllib.loads(read_text(path, MAX_SETTINGS, "a settings file"))
        except FileReadError as exc:
            raise ConfigError(f"config file {exc}") from None
        except ValueError as exc:  # TOMLDecodeError, or a whole number past 4,300 digits
            raise ConfigError(f"config file {str(path)!r} is not valid TOML: "
                              f"{excerpt(exc)}") from None
        except RecursionError:
            raise ConfigError(f"config file {str(path)!r}: nested too deeply to be a settings "
                              "file") from None
        flat: dict[str, Any] = {}
        schedule: list[ScheduledChange] = []
        for key, value in data.items():
            if key == "techniques":
                if not isinstance(value, dict):
                    raise ConfigError(f"{path}: [techniques] must be a table of settings")
                for tkey, tval in value.items():
                    if tkey not in TECHNIQUE_KEYS:
                        raise ConfigError(
                            f"{path}: techniques.{excerpt(tkey)} is unknown; "
                            f"techniques: {', '.join(TECHNIQUE_KEYS)}"
                        )
                    flat[tkey] = tval
            elif key == "at":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ConfigError(f'{path}: at must be a list like ["50:zero_grad=off"]')
                schedule += [ScheduledChange.parse(v) for v in value]
            else:
                if key not in OPTIONS:
                    option(key)  # raises with the list of valid keys
                if key == "preset" and isinstance(value, str) and is_model_file(value):
                    try:
                        value = str(path.parent / Path(value).expanduser())  # beside the file
                    except RuntimeError as exc:  # ~nouser/
                        raise ConfigError(f"{path}: preset: {exc}") from None
                flat[key] = value
        cfg = (base or cls()).with_values(flat)
        return cfg.with_schedule(schedule) if schedule else cfg

    def schedule_warnings(self) -> list[str]:
        """Scheduled changes that will not do what they seem to: past the last step, or the
        same technique changed twice at one step (the last given applies)."""
        out: list[str] = []
        seen: dict[tuple[int, str], Any] = {}
        for c in self.schedule:
            text = f"--at {c.step}:{c.key}={_fmt(c.value)}"
            if c.step >= self.steps:
                out.append(f"{text} never applies: the run's last step is {self.steps - 1}")
            elif (c.step, c.key) in seen:
                out.append(f"{text}: {c.key} is set more than once at step {c.step}; "
                           "the last one given applies")
            seen[(c.step, c.key)] = c.value
        return out

    # --- reading --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("techniques", "schedule")}
        out["techniques"] = self.techniques.to_dict()
        out["schedule"] = [f"{c.step}:{c.key}={_fmt(c.value)}" for c in self.schedule]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Inverse of to_dict (reading a saved run.json)."""
        flat = {k: v for k, v in data.items()
                if k in OPTIONS and not OPTIONS[k].live}
        flat.update(data.get("techniques") or {})
        cfg = cls().with_values(flat)
        sched = [ScheduledChange.parse(s) for s in data.get("schedule") or []]
        return cfg.with_schedule(sched) if sched else cfg


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


__all__ = [
    "RUN_OPTIONS", "TECHNIQUE_KEYS", "TECHNIQUE_OPTIONS", "ConfigError", "RunConfig",
    "ScheduledChange", "TechniqueToggles",
]
