"""A watch's root forward calls and backward roots, followed until their fate is known, and
the diagnoses that come from them: 1 (a forward under grad never backwarded), 2 (a graph
kept across steps), 4 (carried state without detach) and 5 (validation in train mode).

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

from memlens.core.units import format_bytes
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
                 "step", "train_layers")

    def __init__(self, book: CallBook, step: int, model: str, site: str, grad: bool,
                 train_layers: bool) -> None:
        self.book, self.step, self.model, self.site = book, step, model, site
        self.grad, self.train_layers = grad, train_layers
        self.fired = 0
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

    def __init__(self, native, report: Report) -> None:
        tracker = native.CallTracker() if native is not None else None
        self.track, self.fired, self.alive, self.release = (
            tracker.fast_functions() if tracker is not None else (None, None, None, None))
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
        """Forward calls whose fate is known: backwarded, or not (diagnoses 1 and 5)."""
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
            alive = c.alive()
            if self.uncounted and c.handle >= 0:  # no diagnosis 1 without counts
                c.release()
                continue
            if alive and not final and c.step == step:
                keep.append(c)  # it may be backwarded by the next step still
                continue
            self.report(
                dx.GRAD_NOT_BACKWARDED, c.site,
                f"{c.model} forward under grad is never backwarded: its graph held "
                f"{format_bytes(c.bytes)} saved for backward" + (", still alive" if alive else ""),
                "A forward with grad enabled keeps every tensor its backward would need until "
                "the output is dropped. If it is only evaluated (validation, a sample), that "
                "memory and the time to save it are spent for nothing.",
                "wrap it in `torch.no_grad()` (and call model.eval() for validation)",
                c.bytes)
            if c.train_layers:
                self.eval_in_train(c)
            c.release()
        self.pending = keep
        self.reached = reached

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
        old = self._old_marks(step)
        if old:  # a graph in a reference cycle waits for the collector: not a holder
            import gc

            gc.collect()
            old = self._old_marks(step)
        if not old:
            return
        marks = {id(m) for m in old}

        def is_old(node) -> bool:
            m = node.metadata.get("memlens")
            return m is not None and id(m) in marks

        found = dx.find_holder(is_old)
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

    def explain_backward_error(self, exc: RuntimeError, where_now: str) -> None:
        """Diagnosis 4: "backward through the graph a second time" names the forward whose
        output node the failing backward reached for the second time."""
        if "backward through the graph a second time" not in str(exc):
            return
        calls = self.reached + self.pending + self.calls
        origin = next((c for c in reversed(calls) if c.grad and c.reached() > 1), None)
        self.report(
            dx.STATE_NOT_DETACHED, origin.site if origin else where_now,
            "backward reached a graph an earlier backward had freed"
            + (f": it comes from the {origin.model} forward at {origin.site} of step "
               f"{origin.step}, carried into this step" if origin else ""),
            "A tensor carried from one batch to the next (an RNN's hidden state) still points "
            "at the previous batch's graph, whose saved tensors the previous backward freed.",
            "detach what you carry: `hidden = hidden.detach()` at the start of each batch",
            None, phase="backward")
