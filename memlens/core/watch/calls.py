"""A watch's root forward calls and backward roots, followed until their fate is known, and
the diagnoses that come from them: 1 (a forward under grad never backwarded; what keeps
such graphs: core.watch.kept), 2 (a graph kept across steps), 4 (carried state without
detach), 5 (validation in train mode) and 8 (a graph backwarded twice).

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

from memlens.core.findings import (
    BACKWARD_TWICE,
    EVAL_IN_TRAIN_MODE,
    GRAD_NOT_BACKWARDED,
    GRAPH_KEPT,
    STATE_NOT_DETACHED,
    fix_of,
)
from memlens.core.units import byte_figure
from memlens.core.watch import diagnoses as dx
from memlens.core.watch.kept import KeptOutputs

OUTPUT_DEPTH, OUTPUT_ITEMS = 3, 16  # how deep, and how many items of each, outputs are read


class Mark:
    """Kept in an autograd node's metadata: alive exactly as long as the node is."""

    __slots__ = ("__weakref__", "backwards", "kind", "step", "where")

    def __init__(self, step: int, kind: str, where: str) -> None:
        self.step, self.kind, self.where = step, kind, where
        self.backwards = 0  # backwards given this node as their root


class Call:
    """One root forward call: who, where, how long, and whether backward reached it."""

    __slots__ = ("book", "bytes", "fired", "grad", "handle", "kept", "mark", "model", "ms",
                 "site", "step", "train_layers", "tried")

    def __init__(self, book: CallBook, step: int, model: str, site: str, grad: bool,
                 train_layers: bool) -> None:
        self.book, self.step, self.model, self.site = book, step, model, site
        self.grad, self.train_layers = grad, train_layers
        self.fired = 0
        self.tried = False  # a backward of its step raised: its fate is not known
        self.kept = False  # never backwarded and alive at a step's end (core.watch.kept)
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


def tensors_of(tensors) -> list[Tensor]:
    """The tensors passed to a backward (one, or a sequence of them)."""
    return [t for t in (tensors if isinstance(tensors, (list, tuple)) else [tensors])
            if isinstance(t, Tensor)]


Report = Callable[..., None]  # (key, where, message, explanation, fix, nbytes, phase="")


class CallBook:
    """The calls of the current step and those whose fate is still open."""

    def __init__(self, native, report: Report, held_bytes: Callable[[], int]) -> None:
        """`held_bytes()`: the activations (bytes saved for backward) at this step's end."""
        tracker = self._tracker = native.CallTracker() if native is not None else None
        self.track, self.fired, self.alive, self.release, self._unreleased = (
            tracker.fast_functions() if tracker is not None else (None,) * 5)
        self.kept = KeptOutputs(report, held_bytes, self._reaches_held)
        self.report = report
        self.calls: list[Call] = []  # this step's
        self.pending: list[Call] = []  # ended steps' calls not settled yet
        self.reached: list[Call] = []  # backwarded calls whose graph may still be alive
        self.backward_marks: list[weakref.ref] = []  # losses passed to backward
        self.uncounted = False  # a backward ran under compiled autograd: no counts
        self.graph_kept_reported = False
        self.unbackwarded_sites: set[str] = set()  # sites of grad forwards not backwarded
        self._carried: list[int] = []  # this step's forwards without detail (their handles)
        self._left: list[int] = []  # those whose unreleased graph outlived their step

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

    def follow_carried(self, output: Any) -> None:
        """A grad forward of a step without detail (core.watch.detail): followed only to
        learn whether its graph outlives the step unreleased, holding tensors it saved that
        no hook counted. (Without the native tracker auto keeps the detail every step.)"""
        if self.track is not None and (handle := self.track(output)) >= 0:
            self._carried.append(handle)

    def carried_graphs_alive(self) -> bool:
        """At a step's end: whether a graph a step without detail made is still alive
        unreleased (never backwarded, or only with retain_graph=True): what it saved is in
        no figure until it dies. Those dead or released are let go."""
        if not self._carried and not self._left:
            return False
        self._left = left = self._unreleased(self._left + self._carried)  # (one C call)
        self._carried = []
        return bool(left)

    def mark_loss(self, root: Tensor, step: int, where: str) -> None:
        fn = root.grad_fn
        if fn is None:
            return
        m = fn.metadata.get("memlens")
        if m is None:
            m = Mark(step, "loss", where)
            fn.metadata["memlens"] = m
            self.backward_marks.append(weakref.ref(m))
        if isinstance(m, Mark):
            m.backwards += 1

    def end_step(self) -> None:
        self.pending += self.calls
        self.calls = []

    # --- diagnoses ------------------------------------------------------------------------------
    def settle(self, step: int, final: bool) -> None:
        """Forward calls whose fate is known: backwarded, or not (diagnoses 1 and 5). One
        never backwarded whose graph outlives its step's end is followed on: the loop may
        keep it (core.watch.kept)."""
        reached = []
        for c in self.reached:
            if c.alive():
                reached.append(c)
            else:
                c.release()
        alive, dead = [], []
        for c in self.pending:
            if not c.grad:
                continue
            if c.reached():  # kept while its graph lives: a second backward (diagnosis 4)
                if c.alive():
                    reached.append(c)
                else:
                    c.release()
                continue
            self.unbackwarded_sites.add(c.site)  # it takes the detail now (core.watch.detail)
            if (c.tried or (self.uncounted and c.handle >= 0)  # no diagnosis 1 unknowing
                    or c.site in self.kept.reported):  # its site's kept graphs were reported
                c.release()
            elif c.alive():
                alive.append(c)  # it may be backwarded by a later step still
            else:
                dead.append(c)
        self.pending = alive
        self.reached = reached
        self.kept.settle(step, alive, dead, final, self._not_backwarded, self.eval_in_train)
        if final:
            self.pending = []

    def _not_backwarded(self, c: Call) -> None:
        self.report(
            GRAD_NOT_BACKWARDED, c.site,
            f"{c.model} forward under grad is never backwarded"
            + (f": its graph held {byte_figure(c.bytes)} saved for backward" if c.bytes
               else ""),
            "A forward with grad enabled keeps every tensor its backward would need until "
            "the output is dropped. If it is only evaluated (validation, a sample), that "
            "memory and the time to save it are spent for nothing.",
            fix_of(GRAD_NOT_BACKWARDED),
            c.bytes or None)
        if c.train_layers:
            self.eval_in_train(c)
        c.release()

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
            EVAL_IN_TRAIN_MODE, c.site,
            f"{c.model} is evaluated (no backward) while model.training is True, and it has "
            "Dropout/BatchNorm layers",
            "In train mode Dropout drops units and BatchNorm uses the batch's statistics and "
            "updates its running ones: validation figures are noisy and the model changes.",
            fix_of(EVAL_IN_TRAIN_MODE), None)

    def check_graph_kept(self, step: int, retained_bytes: int) -> None:
        """Diagnosis 2: a loss's graph from an earlier step still alive at this step's end:
        the loss passed to backward (marked in its node), or a backwarded forward's output
        (its node followed by weak pointer) that something derived from it keeps: `loss`
        kept while `loss / k` was backwarded, a model's outputs kept whole."""
        if self.graph_kept_reported:
            self.backward_marks = []
            return
        # A graph in a reference cycle waits for the collector: not a holder. (Asked without
        # keeping the answer: a list of the old marks here would keep them alive through it.)
        if not (self._old_marks(step) or self._old_calls(step)):
            return  # (the usual step: no graph of two steps back alive)
        import gc

        gc.collect()
        old, calls = self._old_marks(step), self._old_calls(step)
        steps = {m.step for m in old} | {c.step for c in calls}
        if not steps or (len(steps) < 2 and not retained_bytes):
            # One backwarded loss held a while (`loss` returned from an epoch): nothing
            # saved, nothing growing. Kept graphs that grow keep more than one, or bytes.
            return
        marks = {id(m) for m in old}

        def is_old(node) -> bool:
            m = node.metadata.get("memlens")
            return m is not None and id(m) in marks

        to_marks, to_calls = dx.reaches_node(is_old), self._reaches_held(calls)
        found = dx.find_holder(lambda t: to_marks(t) or (bool(calls) and to_calls(t)))
        first = min(steps)
        origin = next((m.where for m in old if m.step == first), None) or next(
            (c.site for c in calls if c.step == first), "")
        holder, where = found if found else ("a reference memlens could not name", origin)
        self.graph_kept_reported = True
        alive = {m.step for r in self.backward_marks if (m := r()) is not None and m.step < step}
        alive |= {c.step for c in self.reached if c.step < step and c.alive()}
        self.report(
            GRAPH_KEPT, where,
            f"the autograd graph of step {first}'s loss is still alive at step {step}'s "
            f"end (the graphs of {len(alive)} earlier steps alive), held by {holder}",
            "A tensor that requires grad keeps its whole graph (and, before backward, every "
            "saved tensor): summing losses or keeping them, or a model's outputs, in a list "
            "makes memory grow each step. What is kept need not be what was backwarded: "
            "keeping `loss` while backwarding `loss / n` keeps `loss`'s graph.",
            fix_of(GRAPH_KEPT),
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

    def _old_calls(self, step: int) -> list[Call]:
        """Backwarded forwards of two or more steps back whose outputs' graph is alive, and
        which one backward reached: a graph later backwards run through again is carried
        into them (an RNN's hidden state with retain_graph=True: diagnosis 6's)."""
        return [c for c in self.reached if c.step < step - 1 and c.reached() == 1
                and c.alive()]

    def explain_backward_error(self, exc: RuntimeError, step: int, roots: list,
                               carried: tuple[str, str, str] | None = None) -> None:
        """Diagnoses 4 and 8. "Backward through the graph a second time" where the failing
        backward reached an earlier step's forward a second time, or a model was given a
        tensor carrying an earlier graph, is carried state (4); where it is the same loss
        backwarded again, or a graph of this step that an earlier backward of this step
        freed, it is a graph backwarded twice (8). With retain_graph=True carried state
        fails otherwise: the earlier step's graph saved weights that its optimizer step has
        changed in place since ("modified by an inplace operation"); that is 4 where the
        backward reached an earlier step's forward again, or the model was given a tensor
        carrying an earlier graph."""
        self.backward_failed()
        text = str(exc)
        twice = "backward through the graph a second time" in text
        if not twice and "modified by an inplace operation" not in text:
            return
        calls = self.reached + self.pending + self.calls
        origin = next((c for c in reversed(calls) if c.grad and c.reached() > 1), None)
        if not twice and origin is None and carried is None:
            return  # an in-place change of the user's own: autograd's message says it all
        where_now = dx.call_site(1)
        again = any(isinstance(m := getattr(r.grad_fn, "metadata", {}).get("memlens"), Mark)
                    and m.backwards > 1 for r in roots if r.grad_fn is not None)
        if twice and carried is None and (again or origin is None or origin.step >= step):
            self._backwarded_twice(where_now, again, origin)
            return
        where = origin.site if origin else carried[1] if carried else where_now
        self.report(
            STATE_NOT_DETACHED, where,
            "backward reached a graph an earlier backward had "
            + ("freed" if twice else "used, whose saved tensors have changed since")
            + (f": it comes from the {origin.model} forward at {origin.site} of step "
               f"{origin.step}, carried into this step" if origin else
               f": {carried[0]} was passed to {carried[2]} with an earlier step's graph"
               if carried else ""),
            "A tensor carried from one batch to the next (an RNN's hidden state) still points "
            "at the previous batch's graph: the previous backward freed its saved tensors, "
            "or (with retain_graph=True) the optimizer has since changed the weights it saved.",
            fix_of(STATE_NOT_DETACHED),
            None, phase="backward")

    def _backwarded_twice(self, where: str, again: bool, origin: Call | None) -> None:
        self.report(
            BACKWARD_TWICE, where,
            ("backward was called again on a loss it had already run through"
             if again else "backward ran through a graph an earlier backward had freed")
            + (f" (the graph of the {origin.model} forward at {origin.site})" if origin
               else ""),
            "Backward frees the tensors a graph saved as it runs through it: a second "
            "backward through the same graph (the same loss again, or two losses of one "
            "forward each backwarded on its own) finds them gone.",
            fix_of(BACKWARD_TWICE),
            None, phase="backward")
