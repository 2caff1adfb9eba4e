"""A watched step's grad norm, and diagnosis 3 (gradients never cleared).

The norm is taken where the gradients the optimizer uses are final: just before
`clip_grad_norm_` clips them (the norm Lightning and Hugging Face log), else at its step's
pre-hook, or, for `optimizer.step(closure)` (LBFGS, Lightning), at the end of the closure's
first backward, since the closure runs zero_grad, forward and backward inside the step
(LBFGS evaluates it again as it searches: the first is the one the step's loss counts; the
session decides which). On CPU
the native GradWatch takes each gradient's sum of squares as autograd writes it (a
post-accumulate-grad hook); a gradient changed since is read again.

The norm is part of a watch's detail (core.watch.detail): it reads every gradient's bytes,
and the gradients a backward has just written are out of the cache by then (a 400k-parameter
MLP's 1.6 MB took 60 us of a 2 ms CPU step, hooked or read after). A step without the detail
takes it only where its gradients were not cleared (diagnosis 3 follows those steps); else
its grad_norm is left empty, never carried.
A sharded model's (FSDP2: DTensor gradients) is the norm of this rank's shards: the full
norm would take a collective, and memlens never issues one. On a GPU the norm is queued on
the device and read at the step's end (core.watch.device_reads), diagnosis 3 with it: read
before the optimizer step, it made the script wait for backward to finish.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable

from memlens.core.findings import GRADS_NOT_CLEARED, fix_of
from memlens.core.recorder.keys import local_tensor
from memlens.core.recorder.recorder import device_sum_of_squares, sum_of_squares
from memlens.core.watch.device_reads import DeviceRead

GROWING_STEPS = 3  # optimizer steps without clearing, each with a larger grad norm


class GradNorms:
    def __init__(self, native, report: Callable[..., None]) -> None:
        self._native = native
        self._report = report
        self._watches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._last_grad: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.norm_sq = math.nan  # this step's, over every optimizer measured
        self.cleared = True  # zero_grad (or grads set to None, or replaced) since last step
        self._growing: list[float] = []
        # a GPU's sums of squares, read at the step's end: (optimizer's type, read, cleared
        # as it was, where diagnosis 3 would point or None)
        self._queued: list[tuple[str, DeviceRead, bool, str | None]] = []
        self.taking = True  # this step takes the norm (it has the detail: `take`)
        self._skipped = False  # an optimizer's norm was not taken this step: no step norm
        self._rescaled = False  # this step's gradients are unscaled in place (see rescaled)

    def take(self, on: bool) -> None:
        """Whether the steps from now on take the norm (they have the watch's detail): the
        native hooks are on only while they do."""
        if on != self.taking:
            self.taking = on
            for _n, _sum, watch, install in self._watches.values():
                if on:
                    install()
                else:
                    watch.uninstall()

    def new_step(self) -> None:
        self.norm_sq = math.nan
        self._queued = []
        self._skipped = False
        self._rescaled = False

    def rescaled(self) -> None:
        """A backward of this step was given a scaled loss (GradScaler's): its gradients are
        unscaled in place before the optimizer step, on CPU without a new version, so the
        native hooks' sums (of the scaled gradients) are not read; the gradients are."""
        self._rescaled = True

    @property
    def norm(self) -> float:
        """The step's grad norm, over every optimizer that stepped: NaN where one's was not
        taken (a part of the norm is no figure of the step)."""
        if self._queued:
            self._read_queued()
        if self._skipped or self.norm_sq != self.norm_sq:
            return math.nan
        return math.sqrt(self.norm_sq)

    def _add(self, sq: float) -> None:
        self.norm_sq = sq if self.norm_sq != self.norm_sq else self.norm_sq + sq

    def measure(self, opt, where) -> None:
        """Add `opt`'s gradients to the step's norm and check they were cleared. `where()`:
        the place a diagnosis names, asked for only when there is one."""
        first = _first_grad(opt)
        if first is None:
            return
        seen = self._last_grad.get(opt)
        if seen is None or seen() is not first:  # a new tensor: set, not accumulated into
            self.cleared = True
        self._last_grad[opt] = weakref.ref(first)
        if self.cleared and not self.taking:  # a step without the detail: no norm
            self._skipped = True
            self._growing = []  # (diagnosis 3 counts from the next uncleared step on)
            return
        sq = self._native_sum_of_squares(opt)
        queued = None
        if sq < 0:  # one the native read does not take: a GPU's (queued), a DTensor's
            # (FSDP2: its local shard's, as the native read)
            grads = [t for g in opt.param_groups for p in g["params"]
                     if p.grad is not None and (t := local_tensor(p.grad)) is not None]
            queued = _queue_on_gpu(grads)
            if queued is None:
                sq = sum_of_squares(grads)
        name = type(opt).__name__
        if queued is not None:  # where is found now, while the script's line is on the stack
            self._queued.append((name, queued, self.cleared, None if self.cleared else where()))
            return
        self._add(sq)
        self._check_growing(name, math.sqrt(sq), where, self.cleared)

    def _read_queued(self) -> None:
        queued, self._queued = self._queued, []
        for name, read, cleared, site in queued:
            sq = read.values()[0]
            self._add(sq)
            self._check_growing(name, math.sqrt(sq), lambda site=site: site, cleared)

    def check_none(self, optimizers) -> None:
        """Cleared without zero_grad: a first gradient set to None by hand."""
        for o in optimizers:
            for g in o.param_groups:
                if g["params"]:
                    if g["params"][0].grad is None:
                        self.cleared = True
                    break

    def _check_growing(self, name: str, norm: float, where, cleared: bool) -> None:
        """`cleared`: as it was when the optimizer stepped."""
        if cleared:
            self._growing = [norm]
            return
        self._growing.append(norm)
        norms = self._growing[-(GROWING_STEPS + 1):]
        if len(norms) > GROWING_STEPS and all(b > a for a, b in itertools.pairwise(norms)):
            self._report(GRADS_NOT_CLEARED, where(), (
                f"{len(self._growing) - 1} optimizer steps of {name} with no "
                f"zero_grad between them; the grad norm grew {norms[0]:.3g} -> {norms[-1]:.3g}"),
                "backward adds into .grad: without clearing, each step's gradient is the sum of "
                "all the steps before, and the updates grow.",
                fix_of(GRADS_NOT_CLEARED),
                None)

    def _native_sum_of_squares(self, opt) -> float:
        """The optimizer's gradients' sum of squares read in C (CPU float gradients), or -1
        where one is of a kind it does not read (then torch computes it)."""
        if self._native is None:
            return -1.0
        groups = opt.param_groups
        n = (len(groups), len(groups[0]["params"]) if groups else 0, len(groups[-1]["params"]))
        entry = self._watches.get(opt)
        if entry is None or entry[0] != n:  # a param group added (or grown): read it anew
            if entry is not None:
                entry[2].uninstall()
            watch = self._native.GradWatch([p for g in opt.param_groups for p in g["params"]])
            install, sum_sq = watch.fast_functions()
            # Hooks only where a parameter has none of its own; one the script adds later
            # replaces memlens's, and that gradient is then read here.
            if self.taking:
                install()
            entry = self._watches[opt] = (n, sum_sq, watch, install)
        if self._rescaled:
            entry[2].forget()
        return entry[1]()

    def close(self) -> None:
        for _n, _sum, watch, _install in list(self._watches.values()):
            watch.uninstall()  # only the hooks still memlens's own


def _queue_on_gpu(grads: list) -> DeviceRead | None:
    """The gradients' sum of squares queued on their GPU, or None where they are not all on
    one (read at once, sum_of_squares) or one is sparse."""
    if not grads or (grads[0].device.type != "cuda" and not DeviceRead.defer_on_cpu):
        return None
    device = grads[0].device
    if any(g.device != device or g.is_sparse for g in grads):
        return None
    return DeviceRead([device_sum_of_squares(grads)])


def _first_grad(opt):
    """The first gradient an optimizer holds, or None."""
    for g in opt.param_groups:
        for p in g["params"]:
            if p.grad is not None:
                return p.grad
    return None
