"""A watch's root forward calls and backward roots, followed until their fate is known, and
the diagnoses that come from them: 1 (a forward under grad never backwarded, and what keeps
such graphs), 2 (a graph kept across steps), 4 (carried state without detach) and 5
(validation in train mode).

Nothing here holds a user's tensor or graph: forward calls are followed by the native
CallTracker's weak node pointers where it is built (core/native/call_tracker.h), else by a
Python pre-hook on each output's node and a marker in the node's metadata; a marker dies
with its node.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch import Tensor

from memlens.core.units import byte_figure
from memlens.core.watch import diagnoses as dx

OUTPUT_DEPTH, OUTPUT_ITEMS = 3, 16  # how deep, and how many items of each, outputs are read


class Mark:
    """Kept in an autograd node's metadata: alive exactly as long as the node is."""

    __slots__ = ("__weakref__", "kind", "step", "where")

    def __init__(self, step: int, kind: str, where: str) -> None:
        self.step, self.kind, self.where = step, kind, where


class Call:
    """One root forward call: who, where, how long, and whether backward reached it."""

    __slots__ = ("book", "bytes", "fired", "grad", "handle", "mark", "model", "ms", "site",
                 "step", "train_layers", "tried")

    def __init__(self, book: CallBook, step: int, model: str, site: str, grad: bool,
                 train_layers: bool) -> None:
        self.book, self.step, self.model, self.site = book, step, model, site
        self.grad, self.train_layers = grad, train_layers
        self.fired = 0
        self.tried = False  # a backward of its step raised: its fate is not known
        self.handle = -1
        self.ms = 0.0
        self.bytes = 0
        self.mark: weakref.ref | None = None

    def __call__(self, _grad_outputs) -> None:  # the Python pre-hook on an output's node
        self.fired += 1

    def reached(self) -> int:
        """How many backward passes reached this call's graph."""
        return self.book.fired(self.handle) if self.handle >= 0 else self.fired

    def alive(self) -> bool:
        """Whether the call's graph is still alive."""
        if self.handle >= 0:
            return self.book.alive(self.handle)
        return self.mark is not None and self.mark() is not None

    def release(self) -> None:
        if self.handle >= 0:
            self.book.release(self.handle)
            self.handle = -1


def output_nodes(output: Any) -> list:
    """The autograd nodes of a forward's tensor outputs (each once): a tensor, or tensors in
    tuples, lists, dicts and dict-like model outputs (a Hugging Face ModelOutput), nested up
    to OUTPUT_DEPTH deep (OUTPUT_ITEMS items of each looked at)."""
    if isinstance(output, Tensor):
        fn = output.grad_fn
        return [fn] if fn is not None else []
    nodes: list = []
    level = [output]
    for _ in range(OUTPUT_DEPTH):
        inner = []
        for x in level:
            items = list(x.values()) if isinstance(x, dict) else x
            if not isinstance(items, (tuple, list)):
                continue
            for o in items[:OUTPUT_ITEMS]:
                if isinstance(o, Tensor):
                    fn = o.grad_fn
                    if fn is not None and all(fn is not n for n in nodes):
                        nodes.append(fn)
                elif isinstance(o, (tuple, list, dict)):
                    inner.append(o)
        if not inner:
            break
        level = inner
    return nodes


Report = Callable[..., None]  # (key, where, message, explanation, fix, nbytes, phase="")


class CallBook:
    """The calls of the current step and those whose fate is still open."""

    def __init__(self, native, report: Report, seen=None) -> None:
        self._seen = seen  # the Discovery: its modules' attributes may hold old graphs
        tracker = self._tracker = native.CallTracker() if native is not None else None
        self.track, self.fired, self.alive, self.release = (
            tracker.fast_functions() if tracker is not None else (None, None, None, None))
        self.held: list[Call] = []  # never backwarded, alive past their step: kept by the loop
        self._held_sites: set[str] = set()  # forward sites whose kept graphs were reported
        self.report = report
        self.calls: list[Call] = []  # this step's
        self.pending: list[Call] = []  # ended steps' calls not settled yet
        self.reached: list[Call] = []  # backwarded calls whose graph may still be alive
        self.backward_marks: list[weakref.ref] = []  # losses passed to backward
        self.uncounted = False  # a backward ran under compiled autograd: no counts
        self.graph_kept_reported = False

    # --- a forward's output, a backward's roots -----------------------------------------------
    def follow(self, call: Call, output: Any, step: int) -> list:
        """Follow a grad forward's output; returns its nodes (for AMP's casts) where they
        were looked up. A forward whose output holds no graph is an eval forward."""
        if self.track is not None:
            call.handle = self.track(output)
            if call.handle < 0:
                call.grad = False
            return []
        nodes = output_nodes(output)
        if not nodes:
            call.grad = False
            return nodes
        m = Mark(step, "forward", call.site)
        call.mark = weakref.ref(m)
        for node in nodes:
            node.metadata["memlens"] = m
            node.register_prehook(call)
        return nodes

    def mark_loss(self, root: Tensor, step: int, where: str) -> None:
        fn = root.grad_fn
        if fn is not None and "memlens" not in fn.metadata:
            m = Mark(step, "loss", where)
            fn.metadata["memlens"] = m
            self.backward_marks.append(weakref.ref(m))

    def end_step(self) -> None:
        self.pending += self.calls
        self.calls = []

    # --- diagnoses ------------------------------------------------------------------------------
    def settle(self, step: int, final: bool) -> None:
        """Forward calls whose fate is known: backwarded, or not (diagnoses 1 and 5). One
        never backwarded whose graph outlives its step is kept by the loop (a list of
        validation outputs): those are reported together, with what holds them, once they
        span two steps (or at the end)."""
        keep, reached = [], []
        for c in self.reached:
            if c.alive():
                reached.append(c)
            else:
                c.release()
        for c in self.pending:
            if not c.grad:
                continue
            if c.reached():  # kept while its graph lives: a second backward (diagnosis 4)
                if c.alive():
                    reached.append(c)
                else:
                    c.release()
                continue
            if c.tried or (self.uncounted and c.handle >= 0):  # no diagnosis 1 unknowing
                c.release()
                continue
            alive = c.alive()
            if alive and not final and c.step == step:
                keep.append(c)  # it may be backwarded by the next step still
            elif alive:
                self.held.append(c)
            elif c.site in self._held_sites:  # its site's kept graphs were reported
                c.release()
            else:
                self._not_backwarded(c)
        self.pending = keep
        self.reached = reached
        self._settle_held(final)

    def _not_backwarded(self, c: Call) -> None:
        self.report(
            dx.GRAD_NOT_BACKWARDED, c.site,
            f"{c.model} forward under grad is never backwarded"
            + (f": its graph held {byte_figure(c.bytes)} saved for backward" if c.bytes
               else ""),
            "A forward with grad enabled keeps every tensor its backward would need until "
            "the output is dropped. If it is only evaluated (validation, a sample), that "
            "memory and the time to save it are spent for nothing.",
            "wrap it in `torch.no_grad()` (and call model.eval() for validation)",
            c.bytes or None)
        if c.train_layers:
            self.eval_in_train(c)
        c.release()

    def _settle_held(self, final: bool) -> None:
        held: dict[str, list[Call]] = {}
        for c in self.held:
            if c.site in self._held_sites:  # its site's kept graphs were reported
                c.release()
            elif not c.alive():  # let go of before it was named: one call's graph, as such
                self._not_backwarded(c)
            else:
                held.setdefault(c.site, []).append(c)
        self.held = []
        for site, calls in held.items():
            if final or len({c.step for c in calls}) > 1:
                self._held_sites.add(site)
                self._report_held(calls)
            else:
                self.held += calls

    def _report_held(self, held: list[Call]) -> None:
        first, last = held[0], held[-1]
        found = dx.find_holder(self._reaches_held(held), self._modules())
        holder, where = found if found else ("a reference memlens could not name", first.site)
        total = sum(c.bytes for c in held)
        steps = last.step - first.step + 1
        self.report(
            dx.GRAD_NOT_BACKWARDED, where,
            f"{first.model} forward under grad is never backwarded, and its outputs are kept: "
            f"{holder} holds the graphs of {len(held)} calls (at {first.site}), "
            f"{byte_figure(total)} saved for backward"
            + (f", +{byte_figure(total / steps)} a step" if steps > 1 else ""),
            "A forward with grad enabled keeps every tensor its backward would need for as "
            "long as its output lives: kept in a list, each call's graph stays, and memory "
            "grows with every call.",
            "wrap the forward in `torch.no_grad()` (and call model.eval() for validation), "
            "or keep `.detach()`ed outputs or `.item()` values",
            total or None)
        for c in held:
            if c.train_layers:
                self.eval_in_train(c)
            c.release()

    def _modules(self) -> list:
        """The modules the program called at the root (models, loss modules) and the models
        it holds, alive now."""
        if self._seen is None:
            return []
        called = [m for info in list(self._seen.modules.values()) if (m := info.ref()) is not None]
        return called + self._seen.found.model_list()

    def _reaches_held(self, held: list[Call]):
        """A predicate: a tensor's graph reaches an output node of one of `held`."""
        if self._tracker is not None:
            handles = [c.handle for c in held if c.handle >= 0]
            tracker, limit = self._tracker, dx.GRAPH_WALK_LIMIT
            return lambda t: tracker.reaches(handles, t, limit)
        marks = {id(m) for c in held if c.mark is not None and (m := c.mark()) is not None}

        def is_held(node) -> bool:
            m = node.metadata.get("memlens")
            return m is not None and id(m) in marks

        return dx.reaches_node(is_held)

    def backward_failed(self) -> None:
        """A backward raised: whether it would have reached this step's forwards is not
        known, so none of them is called never backwarded."""
        for c in self.calls:
            c.tried = True
        for c in self.pending:
            c.tried = True

    def eval_in_train(self, c: Call) -> None:
        self.report(
            dx.EVAL_IN_TRAIN_MODE, c.site,
            f"{c.model} is evaluated (no backward) while model.training is True, and it has "
            "Dropout/BatchNorm layers",
            "In train mode Dropout drops units and BatchNorm uses the batch's statistics and "
            "updates its running ones: validation figures are noisy and the model changes.",
            "call model.eval() before validation (and model.train() after)", None)

    def check_graph_kept(self, step: int, retained_bytes: int) -> None:
        """Diagnosis 2: a loss's graph from an earlier step still alive at this step's end."""
        if self.graph_kept_reported:
            self.backward_marks = []
            return
        if self._old_marks(step):  # a graph in a reference cycle waits for the collector:
            import gc  # not a holder (a list of the old marks here would keep them alive)

            gc.collect()
        old = self._old_marks(step)
        if not old:
            return
        if len(old) < 2 and not retained_bytes:
            # One backwarded loss held a while (`loss` returned from an epoch): nothing
            # saved, nothing growing. Kept graphs that grow keep more than one, or bytes.
            return
        marks = {id(m) for m in old}

        def is_old(node) -> bool:
            m = node.metadata.get("memlens")
            return m is not None and id(m) in marks

        found = dx.find_holder(dx.reaches_node(is_old), self._modules())
        holder, where = found if found else ("a reference memlens could not name", old[0].where)
        self.graph_kept_reported = True
        alive = sum(1 for r in self.backward_marks if (m := r()) is not None and m.step < step)
        self.report(
            dx.GRAPH_KEPT, where,
            f"the autograd graph of step {old[0].step}'s loss is still alive at step {step}'s "
            f"end ({alive} losses of earlier steps alive), held by {holder}",
            "A tensor that requires grad keeps its whole graph (and, before backward, every "
            "saved tensor): summing losses or keeping outputs in a list makes memory grow "
            "each step.",
            "use `loss.item()` (or `.detach()`) for what you keep across steps",
            retained_bytes or None, once=False)

    def _old_marks(self, step: int) -> list[Mark]:
        """Marks of losses from two or more steps back whose graph is still alive. The last
        step's loss may well be: `loss = train_step(batch)` holds it until the next step
        returns, and this runs inside that step (harmless: backward freed what it saved).
        An accumulated graph (`total += loss`, a list of losses) keeps them all."""
        old, alive = [], []
        for r in self.backward_marks:
            m = r()
            if m is None:
                continue
            alive.append(r)
            if m.step < step - 1:
                old.append(m)
        self.backward_marks = alive
        return old

    def explain_backward_error(self, exc: RuntimeError, where_now: str,
                               carried: tuple[str, str, str] | None = None) -> None:
        """Diagnosis 4: "backward through the graph a second time" names the forward whose
        output node the failing backward reached for the second time. With
        retain_graph=True the same carried state fails otherwise: the earlier step's graph
        saved weights that its optimizer step has changed in place since ("modified by an
        inplace operation"); that is this bug where the backward reached an earlier step's
        forward again, or the step's model was given a tensor carrying an earlier graph."""
        self.backward_failed()
        text = str(exc)
        twice = "backward through the graph a second time" in text
        if not twice and "modified by an inplace operation" not in text:
            return
        calls = self.reached + self.pending + self.calls
        origin = next((c for c in reversed(calls) if c.grad and c.reached() > 1), None)
        if not twice and origin is None and carried is None:
            return  # an in-place change of the user's own: autograd's message says it all
        where = origin.site if origin else carried[1] if carried else where_now
        self.report(
            dx.STATE_NOT_DETACHED, where,
            "backward reached a graph an earlier backward had "
            + ("freed" if twice else "used, whose saved tensors have changed since")
            + (f": it comes from the {origin.model} forward at {origin.site} of step "
               f"{origin.step}, carried into this step" if origin else
               f": {carried[0]} was passed to {carried[2]} with an earlier step's graph"
               if carried else ""),
            "A tensor carried from one batch to the next (an RNN's hidden state) still points "
            "at the previous batch's graph: the previous backward freed its saved tensors, "
            "or (with retain_graph=True) the optimizer has since changed the weights it saved.",
            "detach what you carry: `hidden = hidden.detach()` at the start of each batch",
            None, phase="backward")
