"""Diagnosis 6: the graph backward runs through grows step after step.

A tensor carried from one step into the next with its graph (an RNN's hidden state without
`detach()`) links each step's graph to the one before. Without `retain_graph=True` the second
backward fails (diagnosis 4); with it nothing is freed: every backward runs through every
earlier step again, and its nodes, the bytes they keep and backward's time grow without end.

Seen from two sides, both cheap: the nodes backward's roots reach, counted each step (the
recorder's count), and a model input whose grad_fn is older than the step: autograd numbers
the nodes it makes on a thread in order, so a node numbered before the step began was made
by an earlier step.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor
from torch._C import _autograd

from memlens.core.findings import GRAPH_GROWS, fix_of
from memlens.core.units import byte_figure
from memlens.core.watch import diagnoses as dx

STEPS = 4  # consecutive steps of growth before it is called one
INPUTS = 8  # of a root call's arguments looked at

_sequence_nr = getattr(_autograd, "_get_sequence_nr", None)


class GraphGrowth:
    def __init__(self, report: Callable[..., None]) -> None:
        self.report = report
        self.reported = False
        self.carried: tuple[str, str, str] | None = None  # (holder, call site, model)
        self._first = _sequence_nr() if _sequence_nr is not None else 0
        self._start: tuple[int, int, int, float] | None = None  # where the growth began
        self._last = (0, 0)  # the last step's nodes and retained bytes
        self._runs = self._kept = 0  # steps in a row with more nodes (and more bytes held)
        self.looking = False  # the graph grew last step: name what the model is given

    def new_step(self) -> None:
        """Nodes made from here on belong to the step that begins."""
        if self.looking and _sequence_nr is not None:
            self._first = _sequence_nr()

    def note_inputs(self, args: tuple, kwargs: dict, model: str, site: str) -> None:
        """A model called with a tensor whose graph an earlier step made: the holder.
        (Looked for only while the graph grows: a normal loop pays nothing.)"""
        if self.carried is not None or self.reported or _sequence_nr is None:
            return
        values = list(args[:INPUTS]) + (list(kwargs.values())[:INPUTS] if kwargs else [])
        for v in values:
            for t in (v if isinstance(v, (tuple, list)) else (v,))[:4]:
                if isinstance(t, Tensor):
                    fn = t.grad_fn
                    if fn is not None and fn._sequence_nr() < self._first:
                        name = dx.variable_name(t)
                        self.carried = (f"`{name}`" if name else "a tensor", site, model)
                        return

    def end_step(self, step: int, nodes: int, retained: int, backward_ms: float) -> None:
        if self.reported:
            return
        last_nodes, last_retained = self._last
        self._last = (nodes, retained)
        if self._start is None or nodes <= last_nodes or nodes <= 0:  # (re)start the count
            self._runs = self._kept = 0
            self._start = (step, nodes, retained, backward_ms)
            self.looking = False
            return
        if not self.looking:
            self.looking = True
            if _sequence_nr is not None:
                self._first = _sequence_nr()
        self._runs += 1
        self._kept = self._kept + 1 if retained > last_retained else 0
        if self._runs < STEPS or not (
                self._kept >= STEPS or self.carried is not None):
            return
        self._report(step, nodes, retained, backward_ms)

    def _report(self, step: int, nodes: int, retained: int, backward_ms: float) -> None:
        self.reported = True
        s0, n0, r0, ms0 = self._start
        span = max(1, step - s0)
        holder, site, model = self.carried or ("a tensor memlens could not name", "", "")
        carried = (f", held by {holder} passed to {model} at {site} with the graph of "
                   "earlier steps" if self.carried else f", held by {holder}")
        self.report(
            GRAPH_GROWS, site,
            f"the graph backward runs through grows every step: {n0} nodes at step {s0}, "
            f"{nodes} at step {step} (+{(nodes - n0) / span:.0f} a step); "
            f"{byte_figure(retained)} saved for backward held across steps "
            f"(+{byte_figure(max(0, retained - r0) / span)} a step); backward "
            f"{ms0:.1f} ms → {backward_ms:.1f} ms{carried}",
            "A tensor carried from one step to the next keeps the graph that made it. With "
            "backward(retain_graph=True) nothing frees it: each backward runs through every "
            "earlier step's graph again, so memory and backward's time grow without end "
            "(and the gradients mix in every earlier batch).",
            fix_of(GRAPH_GROWS),
            retained or None)
