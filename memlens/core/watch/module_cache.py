"""Diagnosis 7: activations cached on a module with their graph (`self.cache = h`,
`self.cache.append(h)` inside `forward`).

Such a tensor keeps its autograd graph, and a list of them grows each step; no forward call
or loss of the loop holds it, so the other diagnoses do not see it. At the start of a step
(its first forward under grad, before that forward runs) whatever a module's attributes hold
with a graph was made by an earlier step: that is what is looked for, in every module of
the models found. Looked at on a schedule (SCAN_FIRST steps, then two steps in every
SCAN_EVERY): a scan walks every module's attributes, which a step need not pay for. Its cost
grows with the model (a 65-module transformer's took 0.5 ms, a quarter of a short step's
time spread over eight), so the scans after the first are also held to SCAN_SHARE of the
run's time: a large model's pairs come fewer than every SCAN_EVERY steps, never at a cost
the steps would show.

Left out on purpose: a single value (a loss kept on a LightningModule is diagnosis 2's), a
`_private` attribute (a library's own state: torchmetrics' `_forward_cache`), and an
attribute a forward pre-hook recomputes at each call (`weight_norm`'s `weight`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from torch import Tensor, nn

from memlens.core.findings import MODULE_CACHE, fix_of
from memlens.core.units import byte_figure
from memlens.core.watch import diagnoses as dx

SCAN_FIRST = 4  # steps 1..SCAN_FIRST are looked at
SCAN_EVERY = 8  # then the steps k * SCAN_EVERY and the one after
SCAN_SHARE = 0.01  # of the run's time, at most, the scans after the first take
ITEMS = 4096  # of a cached list or dict's items looked at
# what an attribute holding activations is (a subclass too: a defaultdict, a ring buffer)
_HOLDERS = (Tensor, list, tuple, dict, deque)
_SEQUENCES = (list, tuple, deque)


def _cached(value) -> list[Tensor]:
    """The tensors with a graph in an attribute's value: a tensor, or those in a list, a
    tuple, a deque or a dict (and in those inside them), one value each left out."""
    if isinstance(value, Tensor):
        items = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value[-ITEMS:])
    elif isinstance(value, deque):
        items = list(value)[-ITEMS:]
    elif isinstance(value, dict):
        items = list(value.values())[:ITEMS]
    else:
        return []
    out = []
    for v in items:
        for t in (v,) if isinstance(v, Tensor) else (
                v.values() if isinstance(v, dict) else v if isinstance(v, _SEQUENCES)
                else ()):
            if isinstance(t, Tensor) and _has_graph(t) and t.numel() > 1:
                out.append(t)
    return out


def _has_graph(t: Tensor) -> bool:
    """Whether `t` carries a graph. Reading grad_fn raises for a view whose base was
    changed in place since (FSDP1's parameters, views into its flat parameter that the
    optimizer updates): that is no cache of the module's."""
    try:
        return t.grad_fn is not None
    except RuntimeError:
        return False


def _recomputed(module: nn.Module) -> set[str]:
    """Attributes a forward pre-hook sets at each call (WeightNorm, SpectralNorm: `.name`)."""
    return {name for h in module._forward_pre_hooks.values()
            if isinstance(name := getattr(h, "name", None), str)}


def _walk(roots: list[tuple[object, str]]) -> Iterator[tuple[object, str, dict | None]]:
    """Each module under the (root, name) pairs once over all of them, depth first in
    named_modules()'s order (the `_modules` dicts, a None child skipped), with its name
    (`model.0.attn`) and its __dict__ (None for an object without one)."""
    looked: set[int] = set()
    for root, root_name in roots:
        stack = [(root, root_name)]
        while stack:
            module, name = stack.pop()
            if id(module) in looked:
                continue
            looked.add(id(module))
            attrs = getattr(module, "__dict__", None)
            attrs = attrs if isinstance(attrs, dict) else None
            yield module, name, attrs
            children = attrs.get("_modules") if attrs is not None else None
            if isinstance(children, dict):
                stack += reversed([(m, f"{name}.{key}") for key, m in list(children.items())
                                   if m is not None])


def held_attributes(roots: list, holders: tuple[type, ...] = _HOLDERS) -> tuple[list, list]:
    """The modules under each of `roots` (_walk's, in its order) and, in that order, the
    attributes a kept activation could be in: a name not starting with '_' whose value is an
    instance of one of `holders`, as (index into the modules, name, value). The definition;
    the native helpers' held_attributes (core/native/module_attrs.h) does the same in C,
    where a scan's walk cost 7 us a module in Python."""
    modules: list = []
    held: list = []
    for module, _name, attrs in _walk([(root, "") for root in roots]):
        index = len(modules)
        modules.append(module)
        if attrs is not None:
            held += [(index, name, value) for name, value in list(attrs.items())
                     if isinstance(name, str) and name[:1] != "_"
                     and isinstance(value, holders)]
    return modules, held


def _parameter_storages(models: dict[str, nn.Module]) -> set[int]:
    """The data pointers of the models' parameters' storages."""
    return {p.untyped_storage().data_ptr() for m in models.values() for p in m.parameters()}


def _names(models: dict[str, nn.Module]) -> dict[int, str]:
    """Each module's name as a scan reports it (`model.0.attn`), by id, from the walk a scan
    makes (a module a class's own named_modules hides is named too)."""
    return {id(module): name for module, name, _ in _walk(
        [(model, model_name) for model_name, model in models.items()])}


class ModuleCaches:
    def __init__(self, report: Callable[..., None], native=None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        """`native`: the native helpers (their held_attributes), or None."""
        self._report = report
        self._held = getattr(native, "held_attributes", None) or held_attributes
        self._clock = clock
        self._start = clock()
        self._spent = 0.0  # seconds the scans after the first SCAN_FIRST steps took
        self._scanned = -1  # the step last looked at
        self.pending = False  # this step's first forward under grad looks
        # (module id, attribute) -> (step, bytes, tensors) when first seen
        self._first: dict[tuple[int, str], tuple[int, int, int]] = {}
        self._reported: set[tuple[int, str]] = set()

    def new_step(self, step: int) -> None:
        if step <= SCAN_FIRST:
            self.pending = step > 0
        elif step % SCAN_EVERY == 1:  # the one after a step looked at
            self.pending = self._scanned == step - 1
        else:  # where the scans so far cost at most SCAN_SHARE of the run's time
            self.pending = step % SCAN_EVERY == 0 and (
                self._spent <= SCAN_SHARE * (self._clock() - self._start))

    def scan(self, models: dict[str, nn.Module], step: int) -> None:
        """Look at the models' modules before this step's first forward runs."""
        self.pending = False
        self._scanned = step
        started = self._clock()
        modules, held = self._held(list(models.values()), _HOLDERS)
        names: dict[int, str] | None = None
        params: set[int] | None = None
        skips: dict[int, set[str]] = {}
        for index, attr, value in held:
            tensors = _cached(value)
            if tensors:  # a view of a parameter (tied weights' `emb.weight.t()`) is no cache
                params = params if params is not None else _parameter_storages(models)
                tensors = [t for t in tensors if t.untyped_storage().data_ptr() not in params]
            if not tensors:
                continue
            module = modules[index]
            skip = skips.get(index)
            if skip is None:
                skip = skips[index] = _recomputed(module)
            key = (id(module), attr)
            if attr in skip or key in self._reported:
                continue
            storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                        for t in tensors}
            nbytes = sum(storages.values())
            first = self._first.get(key)
            if first is None:
                self._first[key] = (step, nbytes, len(tensors))
            else:
                self._reported.add(key)
                names = names if names is not None else _names(models)
                self._report_cache(module, names.get(id(module), ""), attr, first,
                                   (step, nbytes, len(tensors)))
        if step > SCAN_FIRST:
            self._spent += self._clock() - started

    def _report_cache(self, module: nn.Module, name: str, attr: str,
                      first: tuple[int, int, int], now: tuple[int, int, int]) -> None:
        step, nbytes, n = now
        if n > first[2] and nbytes > first[1] and step > first[0]:  # more of them: growing
            growth = f", +{byte_figure((nbytes - first[1]) / (step - first[0]))} a step"
        else:
            growth = ", not growing (replaced each step)"
        holder = f"`self.{attr}` of `{name}` ({type(module).__name__})"
        self._report(
            MODULE_CACHE, dx.attribute_site(type(module), attr) or name,
            f"{holder} keeps {n} tensor{'s' if n > 1 else ''} with the autograd graph of an "
            f"earlier step: {byte_figure(nbytes)} at step {step}'s start{growth}",
            "A tensor a forward stores on its module keeps the graph that made it (every "
            "node, and what a graph never backwarded saved) until it is replaced; appended "
            "to a list, each step's stays, and memory grows with every step.",
            fix_of(MODULE_CACHE),
            nbytes or None)
