"""The article's techniques applied to a watched script at run time, without touching its
source: zero_grad, detach_state, no_grad_eval, eval_mode and amp (core.watch.toggles says
what each does), set by `--at STEP:KEY=VALUE`, `memlens.watch(at=[...])`, a framework
callback's `at`, or live through a control channel (core.watch.control_channel: the app).

A WatchSession has one `Interventions` where any of those was given, else None: a watch
with no toggle pays one attribute check at each hook and nothing more. The session calls it
where the techniques act: around each root model call (`before_call`), at zero_grad, before
and after a failed backward, before an optimizer step or a clip, at a step's end and at
each step boundary (where changes apply, the channel is read and a pause waits, between
steps: no step's time).

A change applies at the first step boundary at or after its step, as a `toggle` event
(old -> new: the state as the script wrote it, what core.watch.script_techniques saw, is
the default; a change to what is already so is a no-op and its event says so). Its effect
is computed by core.effects, as the lab's. Safety: a forward that raises under a toggle is
run again as the script wrote it; if that runs, the toggle is turned off (a `refused`
event naming it and the error) and the run goes on. A backward that raises because a
forward memlens ran under no_grad has no graph turns no_grad_eval off the same way and
raises as it would (the script's own exit code, complete files).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from memlens.core.options import format_value
from memlens.core.records import RunEvent
from memlens.core.watch import diagnoses as dx
from memlens.core.watch.amp_override import AmpOverride, autocast_of
from memlens.core.watch.control_channel import ControlFile, WatchStopped
from memlens.core.watch.meta import error_text
from memlens.core.watch.script_techniques import ScriptTechniques
from memlens.core.watch.toggles import (
    NEUTRAL as _NEUTRAL,
)
from memlens.core.watch.toggles import (
    SCRIPT,
    WATCH_KEYS,
    WATCH_NOTES,
    WatchChange,
    is_override,
    parse_value,
    results_text,
)

INPUTS = 8  # of a root call's arguments looked at for carried state (4 inside a tuple)
PAUSE_POLL_S = 0.05
_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)
_NO_GRAPH = "does not require grad and does not have a grad_fn"


class Interventions:
    """The toggles in force for one watch, and where they act (see the module doc)."""

    def __init__(self, schedule: tuple[WatchChange, ...] = (), control: str | None = None, *,
                 post: Callable[[RunEvent], None], now: Callable[[], float],
                 publish: Callable[[dict], None], flush: Callable[[], None],
                 models: Callable[[], list]) -> None:
        self.script = ScriptTechniques()
        self.forced: dict[str, Any] = {}  # the overrides in force
        self.schedule = sorted(schedule, key=lambda c: c.step)
        self.control = ControlFile(control) if control else None
        self._post, self._now, self._publish = post, now, publish
        self._flush, self._models = flush, models
        self._pending: dict[str, Any] = {}  # from the channel, for the next boundary
        self.paused = self.stop_asked = self._closed = False
        self.applied: list[WatchChange] = []
        self.unapplied: list[WatchChange] = []  # scheduled past the run's last step
        self.failures: list[str] = []  # what a toggle made the script do: said at the end
        self.amp: AmpOverride | None = None
        self.step = 0
        self._first = self._run_first = _sequence_nr() if _sequence_nr else 0
        self._no_grad_sites: set[str] = set()  # sites memlens ran under no_grad
        self._no_grad_now: list[str] = []  # ... this step
        self._outputs: dict[int, str] = {}  # data_ptr -> site: evaluation outputs this step
        self._published: dict | None = None
        if control or any(c.key == "amp" and c.value == "bf16" for c in self.schedule):
            # The CPU's bf16 probe runs models of its own: now, before the watch's hooks
            # are installed, never where they would record it as the script's.
            from memlens.core.cpu_support import bf16_support

            bf16_support()

    def add(self, changes: tuple[WatchChange, ...]) -> None:
        self.schedule = sorted([*self.schedule, *changes], key=lambda c: c.step)

    # --- step boundaries ------------------------------------------------------------------
    def boundary(self, step: int) -> None:
        """Step `step` begins: the channel read, a pause waited out, changes applied."""
        if self._closed:
            return
        self.step = step
        if _sequence_nr is not None:
            self._first = _sequence_nr()  # nodes numbered below it are earlier steps'
        self._outputs.clear()
        self._no_grad_now = []
        self._read_control()
        if self.paused and not self.stop_asked:
            self._wait_paused()
        due = {}
        while self.schedule and self.schedule[0].step <= step:
            c = self.schedule.pop(0)
            due[c.key] = c
        for key, c in due.items():
            self._apply(key, c.value)
            self.applied.append(c)
        pending, self._pending = self._pending, {}
        for key, value in pending.items():
            self._apply(key, value)
        self.publish()

    def _read_control(self) -> None:
        if self.control is None:
            return
        for command in self.control.read():
            if "set" in command:
                try:
                    key = str(command["set"])
                    self._pending[key] = parse_value(key, command.get("value"))
                except ValueError as exc:  # the app checks first; a bad line costs a note
                    self._note("toggle refused", f"a toggle from the control channel was "
                               f"refused: {exc}")
            if command.get("pause"):
                self.paused = True
            if command.get("resume"):
                self.paused = False
            if command.get("stop"):
                self.stop_asked = True

    def _wait_paused(self) -> None:
        self._flush()  # the app sees every step made before the pause
        self.publish()
        while self.paused and not self.stop_asked:
            time.sleep(PAUSE_POLL_S)
            if not self.control.path.exists():  # the controller is gone: nobody resumes
                self.stop_asked = True
            self._read_control()
        self.publish()

    def check_stop(self) -> None:
        """Where a step's work begins (a forward, a zero_grad): a stop asked at the last
        boundary ends the script here, its last step complete."""
        if self.stop_asked and not self._closed:
            self._closed = True
            raise WatchStopped(f"stopped at step {self.step} by the controller")

    # --- applying a change ----------------------------------------------------------------
    def effective(self, key: str) -> Any:
        """The state in force: an override's value, else the script's own."""
        if key in self.forced:
            return self.forced[key]
        value = self.script.value(key)
        if value is None:  # not seen yet: memlens does nothing (zero_grad: as written)
            return _NEUTRAL.get(key, SCRIPT)
        return value

    def _apply(self, key: str, value: Any) -> None:
        old = self.effective(key)
        refusal = self._refusal(key, value)
        if refusal:
            self._post_event("refused", key, old, value, f"{key} -> {format_value(value)} "
                             f"refused: the run goes on with {key}={format_value(old)}",
                             refusal)
            return
        own = self.script.value(key)
        if key == "amp" and own not in (None, "off") and value != SCRIPT:
            value = SCRIPT  # the script's own autocast is never taken off nor changed
        if is_override(key, value):
            self.forced[key] = value
        else:
            self.forced.pop(key, None)
        if key == "amp":
            if self.amp is not None:
                self.amp.close_span()
            self.amp = AmpOverride(value) if key in self.forced else None
        new = self.effective(key)
        uses = self.script.uses(key)
        if old == new and old != SCRIPT:
            message = f"no-op: {uses}" + (
                "; memlens leaves the script's own autocast as it is" if key == "amp" and
                own not in (None, "off") else "")
        else:
            message = results_text(key, value if key in self.forced else SCRIPT)
        self._post_event("toggle", key, old, new, message,
                         f"{WATCH_NOTES[key]} Before this step: {uses}.")

    def _refusal(self, key: str, value: Any) -> str:
        """Why this machine cannot run a change (bf16 on a CPU whose oneDNN lacks one of
        the models' layers), as the lab refuses it; "" where it can."""
        if key != "amp" or value != "bf16":
            return ""
        models = self._models()
        params = [p for m in models for p in m.parameters()][:1]
        if not params or params[0].device.type != "cpu":
            return ""
        from memlens.core.cpu_support import bf16_support, layer_kinds

        support = bf16_support()
        kind = support.blocked(layer_kinds(models))
        if not kind:
            return ""
        text = support.refusal(kind)
        return text[0].upper() + text[1:] + "."

    def _turn_off(self, keys: list[str], why: str) -> None:
        """Toggles that made the script raise: off, each with a `refused` event."""
        for key in keys:
            value = self.forced.pop(key, None)
            if value is None:
                continue
            if key == "amp" and self.amp is not None:
                self.amp.close_span()
                self.amp = None
            now = self.effective(key)
            line = (f"{key}={format_value(value)} made the script raise ({why}); memlens "
                    f"turned it off at step {self.step}")
            self.failures.append(line)
            self._post_event("refused", key, now, value, line,
                             f"{WATCH_NOTES[key]} The run goes on with the script's own "
                             f"{key} ({format_value(now)}).")
        self.publish()

    def _post_event(self, kind: str, key: str, old: Any, new: Any, message: str,
                    explanation: str) -> None:
        self._post(RunEvent(self.step, self._now(), kind, key=key, old=old, new=new,
                            message=message, explanation=explanation))

    def _note(self, key: str, message: str) -> None:
        self._post(RunEvent(self.step, self._now(), "info", key=key, message=message))

    # --- where the techniques act ---------------------------------------------------------
    def before_call(self, original, module: nn.Module, args: tuple, kwargs: dict, info):
        """A root module call: (the call to make, its args, its kwargs). Sees what the
        script does and applies the overrides in force; the call returned puts the grad
        mode and the model's train flags back as they were."""
        self.check_stop()
        if info is not None and not info.is_model:
            return original, args, kwargs  # a loss module: the AMP span covers it
        param = next(module.parameters(), None)
        if param is None:
            return original, args, kwargs
        site = dx.call_site(2)
        model = info.name if info is not None else type(module).__name__
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        device = param.device.type
        script, forced = self.script, self.forced
        amp = self.amp
        if grad and not (amp is not None and amp.open):
            script.note_amp(autocast_of(device))
        written = args, kwargs  # as the script wrote the call: what a retry runs
        args, kwargs, acted = self._carried(args, kwargs, model, site, grad)
        evaluation = script.evaluates(site) or (not grad and site not in script.feeds
                                                 and site in script.no_grad)
        if evaluation:
            layers = info.eval_layers if info is not None else False
            script.note_evaluation(module.training, layers, model)
        was_grad, flags = None, None
        if forced:
            if grad and forced.get("no_grad_eval") is True and script.under_grad(site):
                was_grad = torch.is_grad_enabled()
                torch.set_grad_enabled(False)
                acted.append("no_grad_eval")
                self._no_grad_sites.add(site)
                self._no_grad_now.append(site)
            if forced.get("eval_mode") is True and evaluation and module.training:
                flags = [(m, m.training) for m in module.modules()]
                module.eval()
                acted.append("eval_mode")
            if amp is not None and autocast_of(device) in ("off", amp.dtype):
                amp.open_span(device)
                acted.append("amp")
        if not acted and not (evaluation or not grad):
            return original, args, kwargs
        return self._call(original, site, evaluation or not grad, acted, was_grad, flags,
                          *written), args, kwargs

    def _call(self, original, site: str, evaluation: bool, acted: list[str], was_grad,
              flags, args, kwargs):
        outputs = self._outputs

        def undo() -> None:
            if was_grad is not None:
                torch.set_grad_enabled(was_grad)
            if flags is not None:
                for m, training in flags:
                    m.training = training

        def call(module, *a, **k):
            try:
                out = original(module, *a, **k)
            except BaseException as exc:
                undo()
                if not acted or not isinstance(exc, Exception):
                    raise
                failed = exc
            else:
                undo()
                if evaluation:
                    for t in _tensors(out):
                        outputs[t.data_ptr()] = site
                return out
            return self._again(original, module, acted, failed, site, args, kwargs)

        return call

    def _again(self, original, module, acted: list[str], failed: Exception, site: str,
               args, kwargs) -> Any:
        """A forward raised under toggles: run it as the script wrote it (outside the
        except block: a second error is the script's own, shown alone)."""
        if self.amp is not None:
            self.amp.close_span()
        out = original(module, *args, **kwargs)
        self._turn_off(acted, f"{error_text(failed)} in the forward at {site}; it was run "
                       "again as the script wrote it")
        return out

    def _carried(self, args: tuple, kwargs: dict, model: str, site: str, grad: bool):
        """Inputs carrying an earlier step's graph: seen, and detached where detach_state
        is forced. (args, kwargs, the toggles that acted)."""
        acted: list[str] = []
        if _sequence_nr is None or not grad or self._first == self._run_first:
            self._check_feeds(args, grad)
            return args, kwargs, acted
        detach = self.forced.get("detach_state") is True
        lo, hi = self._run_first, self._first
        new_args = list(args)
        for i, v in enumerate(args[:INPUTS]):
            out, name = _detach_old(v, lo, hi, detach)
            if name is not None:
                self.script.note_carried(name, model, site)
                if detach:
                    new_args[i] = out
                    acted.append("detach_state")
        new_kwargs = kwargs
        for k, v in list(kwargs.items())[:INPUTS]:
            out, name = _detach_old(v, lo, hi, detach)
            if name is not None:
                self.script.note_carried(name, model, site)
                if detach:
                    new_kwargs = {**new_kwargs, k: out}
                    acted.append("detach_state")
        self._check_feeds(args, grad)
        return tuple(new_args), new_kwargs, acted[:1]

    def _check_feeds(self, args: tuple, grad: bool) -> None:
        """A model called under grad with an evaluation's output: that was training (a GAN's
        generator under no_grad for the discriminator's step), not an evaluation."""
        if grad and self._outputs:
            for v in args[:INPUTS]:
                for t in _tensors(v):
                    site = self._outputs.get(t.data_ptr())
                    if site is not None:
                        self.script.feeds.add(site)

    def zero_grad(self, original, owner, args: tuple, kwargs: dict):
        """The call to make for a script's zero_grad: as written, with set_to_none forced,
        or skipped (zero_grad=off)."""
        self.check_stop()
        asked = kwargs.get("set_to_none", args[0] if args else True)  # torch's default
        self.script.note_zero_grad(bool(asked))
        if self.amp is not None:
            self.amp.close_span()
        mode = self.forced.get("zero_grad")
        if mode is None or (mode != "off" and (mode == "set_to_none") == bool(asked)):
            return lambda: original(owner, *args, **kwargs)
        if mode == "off":
            return _skipped
        return lambda: original(owner, set_to_none=mode == "set_to_none")

    def before_backward(self, call, tensors, returns_grads: bool):
        amp = self.amp
        if amp is None:
            return call
        amp.close_span()
        return amp.scaled(call, tensors, returns_grads)

    def backward_failed(self, exc: BaseException) -> None:
        """A backward raised: where it needed a graph memlens's no_grad did not build,
        no_grad_eval goes off (and those sites are known to be trained)."""
        if not self._no_grad_now or _NO_GRAPH not in str(exc):
            return
        sites = list(dict.fromkeys(self._no_grad_now))
        for site in sites:
            self.script.note_backwarded(site)
        self._turn_off(["no_grad_eval"], f"{error_text(exc)}: a backward needed the graph of "
                       f"the forward at {sites[0]}, which memlens ran under no_grad")

    def before_step(self, opt) -> None:
        """An optimizer is about to step (or its gradients to be clipped)."""
        if self.amp is not None:
            self.amp.close_span()
            self.amp.unscale(opt)

    def end_step(self, book, stepped: bool) -> None:
        if self.amp is not None:
            self.amp.end_step()
        self.script.end_step([*book.pending, *book.calls], self.step, stepped,
                             self._no_grad_sites)
        self.publish()

    # --- what run.json says ---------------------------------------------------------------
    def state(self) -> dict:
        s = self.script
        return {"in_force": {k: self.effective(k) for k in WATCH_KEYS},
                "overrides": dict(self.forced),
                "script": {k: s.value(k) for k in WATCH_KEYS},
                "uses": {k: s.uses(k) for k in WATCH_KEYS},
                "unavailable": s.unavailable(),
                "controlled": self.control is not None, "paused": self.paused}

    def publish(self) -> None:
        state = self.state()
        if state != self._published:
            self._published = state
            self._publish({"techniques": state})

    def close(self, error: BaseException | None) -> None:
        """The watch ends: the span closed; changes scheduled past the last step said."""
        self._closed = True
        if self.amp is not None:
            self.amp.close_span()
        self.unapplied, self.schedule = self.schedule, []
        for c in self.unapplied:
            self._note("toggle never applied", f"--at {c.text()} never applied: the run "
                       f"ended at step {self.step}")
        self._read_control()
        for key, value in self._pending.items():  # the app's, after the last boundary
            self._note("toggle never applied", f"{key}={format_value(value)} never applied: "
                       f"the run ended before its next step boundary (step {self.step})")
        if error is not None and self.forced and not isinstance(error, WatchStopped):
            line = (f"the script raised {error_text(error)} while memlens's toggles "
                    f"{', '.join(f'{k}={format_value(v)}' for k, v in self.forced.items())} "
                    "were in force; run it again without them to tell whether they caused it")
            self.failures.append(line)
            self._note("toggles in force at an error", line)
        self.publish()


def _skipped() -> None:
    """zero_grad=off: the script's call does nothing."""


def _tensors(v) -> list[Tensor]:
    if isinstance(v, Tensor):
        return [v]
    if isinstance(v, (tuple, list)):
        return [t for t in v[:4] if isinstance(t, Tensor)]
    return []


def _detach_old(v, lo: int, hi: int, detach: bool):
    """(v with its old-graph tensors detached where `detach`, the name of one such, or
    None where v carries none). A tuple or list (an LSTM's (h, c)) keeps its type."""
    if isinstance(v, Tensor):
        fn = v.grad_fn
        if fn is not None and lo <= fn._sequence_nr() < hi:
            return (v.detach() if detach else v), _name(v)
        return v, None
    if isinstance(v, (tuple, list)) and v and len(v) <= 4:
        name = None
        items = list(v)
        for i, t in enumerate(items):
            if isinstance(t, Tensor) and t.grad_fn is not None \
                    and lo <= t.grad_fn._sequence_nr() < hi:
                name = name or _name(v) or _name(t)
                if detach:
                    items[i] = t.detach()
        if name is None:
            return v, None
        return (_same_type(v, items) if detach else v), name
    return v, None


def _same_type(v, items: list):
    if type(v) in (tuple, list):
        return type(v)(items)
    return type(v)(*items) if hasattr(v, "_fields") else tuple(items)  # a namedtuple


def _name(obj) -> str:
    name = dx.variable_name(obj)
    return f"`{name}`" if name else "a tensor"
