"""Diagnosis 1's second form: root forwards under grad that no backward reached, whose
outputs the loop keeps past a step's end (`all_preds.append(model(x))`, `preds[k] =
model(x)`, `history.append(validate())`, a list emptied each epoch), reported with what
holds them, what they keep and how that grows.

A call's fate is settled at each step's end (core.watch.calls.CallBook.settle): one that no
backward reached and whose graph still lives is looked at again at the next step's end. Its
site's graphs are "kept" once one of them outlives a second step's end, or dies unreached
after outliving one while the site kept two or more at a time (a dict refilled each step:
each set of outputs lives until the next replaces it). A single output held past its step
and then dropped (a sample kept in a variable until the next one) stays the plain form: the
forward never backwarded.

The bytes are those the step ends show: activations (saved for backward and still held) at
the end of the step where the site kept the most calls, each storage once as every sample
counts it, not the sum of each call's own bytes (calls on one input share it). The growth is
the change of that figure a step from the first step the site kept a graph to that one.
"""

from __future__ import annotations

from collections.abc import Callable

from memlens.core.findings import GRAD_NOT_BACKWARDED
from memlens.core.units import byte_figure
from memlens.core.watch import diagnoses as dx

HOLDER_TRIES = 2  # step ends at which a site's holder is looked for (a walk of the script)
STEADY_OBSERVATIONS = 3  # step ends seen before a kept site's growth is reported


class _Site:
    __slots__ = ("confirmed", "holder", "looked", "model", "observed", "released")

    def __init__(self, model: str) -> None:
        self.model = model
        self.observed: list[tuple[int, int, int]] = []  # (step, calls alive, bytes held)
        self.holder: tuple[str, str] | None = None
        self.looked = 0
        self.confirmed = False  # a graph of it outlived two step ends, or died kept
        self.released = False  # some of its kept graphs were let go (a list emptied)


class KeptOutputs:
    """The sites of never-backwarded calls whose graphs outlive their step."""

    def __init__(self, report: Callable[..., None], held_bytes: Callable[[], int],
                 reaches: Callable[[list], Callable]) -> None:
        """`held_bytes()`: activations at this step's end; `reaches(calls)`: a predicate on
        a tensor, true where its graph reaches one of the calls' outputs."""
        self._report, self._held_bytes, self._reaches = report, held_bytes, reaches
        self._sites: dict[str, _Site] = {}
        self.reported: set[str] = set()  # sites reported: their later calls are not followed

    def settle(self, step: int, alive: list, dead: list, final: bool,
               not_backwarded: Callable, eval_in_train: Callable) -> None:
        """At step `step`'s end: `alive` the unreached calls whose graph lives, `dead` those
        whose graph died unreached since the last step's end. Reports what is known."""
        if not alive and not dead and not self._sites:
            return  # (every step of a loop that keeps nothing)
        by_site: dict[str, list] = {}
        for c in alive:
            by_site.setdefault(c.site, []).append(c)
        held = self._held_bytes() if by_site else 0
        for site, calls in by_site.items():
            s = self._sites.get(site)
            if s is None:
                s = self._sites[site] = _Site(calls[0].model)
            s.observed.append((step, len(calls), held))
            if any(c.step < step for c in calls) or (final and len(calls) > 1):
                s.confirmed = True  # one outlived a second step's end
            if s.holder is None and s.looked < HOLDER_TRIES and (
                    len(calls) > 1 or s.confirmed):
                s.looked += 1
                s.holder = dx.find_holder(self._reaches(calls))
        for c in dead:
            s = self._sites.get(c.site)
            if c.kept and s is not None and max(n for _, n, _ in s.observed) > 1:
                s.confirmed = s.released = True  # kept with others, then let go
        for c in dead:
            s = self._sites.get(c.site)
            if c.site in self.reported or (s is not None and s.confirmed):
                c.release()  # its site's report says it
            else:
                not_backwarded(c)
        for site, calls in by_site.items():
            s = self._sites[site]
            if s.confirmed and (final or s.released or len(s.observed) >= STEADY_OBSERVATIONS):
                self._report_site(site, s, calls, eval_in_train)
            elif final:  # at the end one output alone is the plain form
                for c in calls:
                    not_backwarded(c)
        for site, s in list(self._sites.items()):  # kept, then let go entirely
            if site not in by_site and s.confirmed and site not in self.reported:
                self._report_site(site, s, [], eval_in_train)
        for c in alive:
            c.kept = True

    def _report_site(self, site: str, s: _Site, calls: list, eval_in_train: Callable) -> None:
        self.reported.add(site)
        first = s.observed[0]
        peak = max(s.observed, key=lambda o: (o[1], o[0]))
        step, n, nbytes = peak
        holder, where = s.holder or ("a reference memlens could not name", site)
        if peak[0] > first[0] and nbytes > first[2]:
            growth = f", +{byte_figure((nbytes - first[2]) / (peak[0] - first[0]))} a step"
            growth += " until they were let go of" if s.released else ""
        else:
            growth = ", not growing" + (" (each set let go of as the next came)"
                                        if s.released else "")
        self._report(
            GRAD_NOT_BACKWARDED, where,
            f"{s.model} forward under grad is never backwarded, and its outputs are kept past "
            f"the step's end: {holder} held the graphs of {n} calls (at {site}), "
            f"{byte_figure(nbytes)} saved for backward at step {step}'s end{growth}",
            "A forward with grad enabled keeps every tensor its backward would need for as "
            "long as its output lives: kept in a list or a dict, each call's graph stays "
            "with it, and memory grows with every call kept.",
            "wrap the forward in `torch.no_grad()` (and call model.eval() for validation), "
            "or keep `.detach()`ed outputs or `.item()` values",
            nbytes or None)
        for c in calls:
            if c.train_layers:
                eval_in_train(c)
            c.release()
        del self._sites[site]
