"""What a watched script does itself, for each technique a watch can toggle: how it calls
zero_grad, whether its models are given state that carries an earlier step's graph, which
of its forwards are evaluations (never backwarded) and how it runs them, whether its
forwards run under autocast.

The default of every toggle is the script's own state, so this is what a toggle's event
compares with (a toggle that sets what the script already does is a no-op, said so), what
run.json's `techniques` says and what the app's Techniques panel shows. Only what was seen
is claimed: a state stays unknown (None) until the script showed it.

Call sites are the user's `file:line` of a root model call (core.watch.diagnoses.call_site).
A site is an evaluation once a step ended with one of its calls unreached by any backward
(its graph freed, or alive a step later) or run under no_grad, and none of its calls was
ever reached, and its output was never given to a model called under grad (a GAN's
generator run under no_grad for its discriminator's step is training, not evaluation).
"""

from __future__ import annotations

from typing import Any

SEEN_STEPS = 2  # steps watched before "no carried state" or "never cleared" is a state


class ScriptTechniques:
    def __init__(self) -> None:
        self.set_to_none: bool | None = None  # the last zero_grad call's
        self._calls_this_step = 0
        self.uncleared_steps = 0  # steps that stepped an optimizer with no zero_grad call
        self.steps = 0  # steps ended
        self.backwarded: set[str] = set()
        self.unreached: set[str] = set()  # under grad, never reached (so far)
        self.no_grad: set[str] = set()  # run under no_grad by the script
        self.feeds: set[str] = set()  # whose output a model called under grad was given
        self.carried: str | None = None  # "`hidden` given to model at x.py:12"
        self.amp: str | None = None  # "off", "bf16", "fp16": at the script's grad forwards
        self.eval_in_train: str | None = None  # a model evaluated in train mode (its name)
        self.eval_in_eval = False
        self.eval_layers = False  # an evaluated model has Dropout/BatchNorm

    # --- what the hooks see -----------------------------------------------------------------
    def note_zero_grad(self, set_to_none: bool) -> None:
        self.set_to_none = set_to_none
        self._calls_this_step += 1

    def note_amp(self, dtype: str) -> None:
        self.amp = dtype

    def note_carried(self, name: str, model: str, site: str) -> None:
        if self.carried is None:
            self.carried = f"{name} given to {model} at {site}"

    def note_evaluation(self, training: bool, eval_layers: bool, model: str) -> None:
        if not eval_layers:
            return
        self.eval_layers = True
        if training:
            self.eval_in_train = self.eval_in_train or model
        else:
            self.eval_in_eval = True

    def end_step(self, calls, step: int, stepped: bool, forced: set[str]) -> None:
        """A step ended: `calls` (core.watch.calls.Call) of this step and those still
        pending; `forced`: the sites memlens ran under no_grad itself."""
        self.steps += 1
        if stepped and not self._calls_this_step:
            self.uncleared_steps += 1
        self._calls_this_step = 0
        for c in calls:
            if not c.site:
                continue
            if c.grad:
                if c.reached():
                    self.backwarded.add(c.site)
                elif c.step < step or not c.alive():
                    self.unreached.add(c.site)
            elif c.site not in forced:
                self.no_grad.add(c.site)

    def note_backwarded(self, site: str) -> None:
        """A backward needed this site's graph (memlens had run it under no_grad)."""
        self.backwarded.add(site)

    # --- what follows from it ---------------------------------------------------------------
    def evaluates(self, site: str) -> bool:
        """A site whose forwards are evaluations (see the module doc)."""
        return ((site in self.unreached or site in self.no_grad)
                and site not in self.backwarded and site not in self.feeds)

    def under_grad(self, site: str) -> bool:
        """An evaluation the script runs under grad (what no_grad_eval acts on)."""
        return site in self.unreached and self.evaluates(site)

    def value(self, key: str) -> Any:
        """The script's own state of `key` in the lab's values, or None while not known."""
        if key == "zero_grad":
            if self.set_to_none is not None:
                return "set_to_none" if self.set_to_none else "zeros"
            return "off" if self.uncleared_steps >= SEEN_STEPS else None
        if key == "detach_state":
            if self.carried is not None:
                return False
            return True if self.steps >= SEEN_STEPS else None
        if key == "no_grad_eval":
            sites = [s for s in self.unreached | self.no_grad if self.evaluates(s)]
            if not sites:
                return None
            return not any(self.under_grad(s) for s in sites)
        if key == "eval_mode":
            if self.eval_in_train:
                return False
            return True if self.eval_in_eval else None
        if key == "amp":
            return self.amp
        return None

    def uses(self, key: str) -> str:
        """What the script does, in a sentence (the app's Techniques panel, event texts)."""
        value = self.value(key)
        if key == "zero_grad":
            if value in ("set_to_none", "zeros"):
                return (f"the script calls zero_grad(set_to_none={value == 'set_to_none'})")
            return ("the script never calls zero_grad" if value == "off"
                    else "no zero_grad call seen yet")
        if key == "detach_state":
            if self.carried is not None:
                return f"the script carries state with its graph: {self.carried}"
            return ("no carried state seen: no model input carries an earlier step's graph"
                    if value else "no step seen yet")
        if key == "no_grad_eval":
            grad = sorted(s for s in self.unreached if self.under_grad(s))
            if grad:
                return (f"the script runs forwards never backwarded under grad at "
                        f"{', '.join(grad[:2])}")
            return ("the script's evaluation forwards run under no_grad" if value
                    else "no evaluation forward (one never backwarded) seen yet")
        if key == "eval_mode":
            if self.eval_in_train:
                return f"the script evaluates {self.eval_in_train} in train mode"
            if self.eval_in_eval:
                return "the script evaluates its models in eval mode"
            return ("no evaluated model with Dropout or BatchNorm seen yet"
                    if not self.eval_layers else "no evaluation seen yet")
        if key == "amp":
            if value is None:
                return "no forward under grad seen yet"
            return ("the script's forwards run in full precision (no autocast)" if value == "off"
                    else f"the script runs its forwards under autocast({value})")
        return ""

    def unavailable(self) -> dict[str, str]:
        """Toggles with nothing to act on in this script, and why (the app greys them)."""
        if self.carried is None:
            return {"detach_state": "no carried state seen: no model input carries an earlier "
                                    "step's graph, so there is nothing to detach"}
        return {}
