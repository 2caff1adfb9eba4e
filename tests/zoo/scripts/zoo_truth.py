"""The zoo's own counts, made without memlens: what a zoo script prints for the harness.

A zoo script is written as its community writes it; the only lines it has for the zoo are
`import zoo_truth`, `zoo_truth.track(model, ...)` once its models exist, and
`zoo_truth.final(loss, model, ...)` at its end (a script with a hand-written update also
calls `zoo_truth.count_step()` after each update). Printed, for tests/zoo/test_zoo.py:

  GNORM k sq=S     the sum of squares of the gradients the k-th optimizer step stepped
  TRUTH k params=P grads=G optimizer=O    right after the k-th optimizer step (k from 1)
  STEPS n          the steps as the script or its framework counts them (default OPT_STEPS)
  OPT_STEPS n      Optimizer.step() calls, from a global step post-hook registered here
  BYTES params=P grads=G optimizer=O buffers=B   at the end
  FINAL loss=<float> params=<sha256 of all parameters' bytes>

Bytes count storages, each once (a view shares its base's), as untyped_storage().nbytes():
grads and optimizer state leave out a parameter's storage; optimizer state is every tensor
in Optimizer.state, also inside lists (LBFGS keeps its history in lists).

An optimizer that wraps another (accelerate's AcceleratedOptimizer) is not counted: its
step() runs at every micro-batch and steps the one it wraps only at an accumulation's end,
which is counted. Under DDP only rank 0 prints (LOCAL_RANK): the others' lines would mix
with its own.

With ZOO_ACT=1 (a plain run only: a second saved_tensors_hooks would hide memlens's) it
also counts what autograd saves for backward, through torch's own saved_tensors_hooks, and
prints, at the end of each root module call (a module with parameters called while no other
module call runs, seen through torch's global module hooks):

  ACT k grad=0|1 backward=0|1 bytes=N graph=G all=M
      k: steps so far; backward=1: a call made inside autograd's backward (checkpoint's
      recomputation); N: the storages saved for backward and still held, each once, less
      the parameters' and buffers'; G: what those cost, a storage whole where only saved
      tensors hold it, else the bytes the saved tensors reach in it (a batch sliced out of a
      dataset tensor the script holds anyway: the batch, not the dataset); M: N with the
      parameters' and buffers' storages
"""

from __future__ import annotations

import builtins
import hashlib
import os
import weakref

import torch

_state = {"opt_steps": 0, "marked": 0}
_QUIET = os.environ.get("LOCAL_RANK", "0") != "0"  # another rank than 0 of a DDP job


def print(*args, **kwargs) -> None:  # every line of this module: rank 0's only
    if not _QUIET:
        builtins.print(*args, **kwargs)
_optimizers: list[weakref.ref] = []
_models: list[weakref.ref] = []


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def _key(t: torch.Tensor):
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def _live_optimizers():
    return [o for r in _optimizers if (o := r()) is not None]


def _live_models():
    return [m for r in _models if (m := r()) is not None]


def _params(models=()):
    seen, out = set(), []
    groups = [list(m.parameters()) for m in (*_live_models(), *models)]
    groups += [[p for g in o.param_groups for p in g["params"]] for o in _live_optimizers()]
    for ps in groups:
        for p in ps:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def counts(models=()):
    """(params, grads, optimizer, buffers) bytes now, each storage once."""
    params = _params(models)
    pkeys = {}
    for p in params:
        k, n = _key(p)
        pkeys[k] = n
    grads = {}
    for p in params:
        if p.grad is not None:
            k, n = _key(p.grad)
            if k not in pkeys and k != 0:
                grads[k] = n
    opt = {}
    for o in _live_optimizers():
        for s in o.state.values():
            for t in _tensors(s):
                k, n = _key(t)
                if k not in pkeys and k != 0:
                    opt[k] = n
    bufs = {}
    for m in (*_live_models(), *models):
        for b in m.buffers():
            k, n = _key(b)
            if k not in pkeys and k != 0:
                bufs[k] = n
    return sum(pkeys.values()), sum(grads.values()), sum(opt.values()), sum(bufs.values())


def _seen_optimizer(opt) -> None:
    if all(r() is not opt for r in _optimizers):
        _optimizers.append(weakref.ref(opt))


def _sum_sq(params) -> float:
    return sum(float(p.grad.detach().double().pow(2).sum()) for p in params
               if p.grad is not None)


def _post_step(opt, args, kwargs) -> None:
    if isinstance(opt.__dict__.get("optimizer"), torch.optim.Optimizer):
        return  # accelerate's wrapper: the optimizer it wraps steps (or not)
    _seen_optimizer(opt)
    _state["opt_steps"] += 1
    # The gradients it stepped: read after the step (the zoo's optimizers never change
    # .grad in place), or where a closure (LBFGS, Lightning) first returned inside it (LBFGS
    # evaluates it again as it searches: the first evaluation's, as its loss is), or before
    # a clip_grad_norm_ (or clip_grads_with_norm_) since the last step clipped them (the
    # norm frameworks log).
    params = [p for g in opt.param_groups for p in g["params"]]
    clipped = _state.pop("clipped", None)
    first = _state.pop("closure_sq", None)
    if clipped is not None and {id(p) for p in params} <= set(clipped):
        sq = sum(clipped[id(p)] for p in params if clipped[id(p)] is not None)
    elif first is not None:
        sq = first
    else:
        sq = _sum_sq(params)
    print(f"GNORM {_state['opt_steps']} sq={sq!r}", flush=True)
    p, g, o, _b = counts()
    print(f"TRUTH {_state['opt_steps']} params={p} grads={g} optimizer={o}", flush=True)


def _pre_step(opt, args, kwargs):
    """A step given a closure: the closure wrapped to read the gradients when it first
    returns (what it returns, and raises, unchanged)."""
    closure = args[1] if len(args) > 1 else kwargs.get("closure")  # args[0]: the optimizer
    if closure is None or isinstance(opt.__dict__.get("optimizer"), torch.optim.Optimizer):
        return None
    params = [p for g in opt.param_groups for p in g["params"]]
    _state.pop("closure_sq", None)

    def first_read(*a, **k):
        out = closure(*a, **k)
        if "closure_sq" not in _state:
            _state["closure_sq"] = _sum_sq(params)
        return out

    if len(args) > 1:
        return (args[0], first_read, *args[2:]), kwargs
    return args, {**kwargs, "closure": first_read}


def _wrap_clip(original):
    def clip_grad_norm_(parameters, *args, **kwargs):
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        seen = _state.setdefault("clipped", {})
        for p in params:  # each gradient's sum of squares before its first clip this step
            if id(p) not in seen:
                seen[id(p)] = None if p.grad is None else _sum_sq([p])
        return original(params, *args, **kwargs)

    return clip_grad_norm_


torch.nn.utils.clip_grad_norm_ = _wrap_clip(torch.nn.utils.clip_grad_norm_)
# accelerate 1.x takes the norm with get_total_norm and clips with clip_grads_with_norm_
if hasattr(torch.nn.utils, "clip_grads_with_norm_"):
    torch.nn.utils.clip_grads_with_norm_ = _wrap_clip(torch.nn.utils.clip_grads_with_norm_)

from torch.optim.optimizer import (  # noqa: E402
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

register_optimizer_step_pre_hook(_pre_step)
register_optimizer_step_post_hook(_post_step)


def track(*models) -> None:
    """The script's models (counted in params even where no optimizer holds them)."""
    for m in models:
        if all(r() is not m for r in _models):
            _models.append(weakref.ref(m))


def count_step() -> None:
    """A hand-written update's step (no Optimizer.step to count)."""
    _state["marked"] += 1


def final(loss, *models, steps=None) -> None:
    track(*models)
    n = _state["opt_steps"]
    print(f"STEPS {n + _state['marked'] if steps is None else steps}")
    print(f"OPT_STEPS {n}")
    p, g, o, b = counts()
    print(f"BYTES params={p} grads={g} optimizer={o} buffers={b}")
    h = hashlib.sha256()
    for p in _params():
        t = p.detach().cpu().contiguous().reshape(-1)
        h.update(t.view(torch.uint8).numpy().tobytes())
    loss = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
    print(f"FINAL loss={loss!r} params={h.hexdigest()}", flush=True)


# --- activations saved for backward (ZOO_ACT=1, plain runs only) ----------------------------

class _Held:
    __slots__ = ("__weakref__", "t", "version")


_held: list[weakref.ref] = []
_depth = [0]
_static_keys: set = set()  # storages of parameters and buffers of the modules called


def _pack(t):
    h = _Held()
    h.t = t.detach() if t.requires_grad else t
    h.version = t._version
    _held.append(weakref.ref(h))
    return h


def _unpack(h):
    # A pack hook turns autograd's own in-place check off: made here as autograd makes it,
    # so a script that fails plain fails the same way under ZOO_ACT.
    if h.t._version != h.version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{h.t.type()} {list(h.t.shape)}], is at version "
            f"{h.t._version}; expected version {h.version} instead.")
    return h.t


def _span(t) -> tuple[int, int]:
    """The bytes of its storage a tensor reaches: [first, last + 1) from its offset and
    strides."""
    es = t.element_size()
    lo = t.storage_offset() * es
    if t.numel() == 0:
        return lo, lo
    extent = sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride())) + 1
    return lo, lo + extent * es


def _graph_bytes(tensors) -> int:
    """What saved tensors in one storage cost: the whole storage where only they hold it
    (autograd keeps it alive), else only the bytes they reach (a batch sliced out of a
    dataset tensor the script holds anyway: the batch, not the dataset)."""
    st = tensors[0].untyped_storage()
    impls = len({id(t) for t in tensors})
    others = torch._C._storage_Use_Count(st._cdata) - 1 - impls  # less `st` itself
    if others <= 0:
        return st.nbytes()
    return _union([_span(t) for t in tensors])


def _union(intervals) -> int:
    total, end = 0, -1
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def _pre(module, args) -> None:
    _depth[0] += 1


def _post(module, args, out) -> None:
    _depth[0] -= 1
    if _depth[0] > 0:
        return
    _depth[0] = 0
    params = list(module.parameters())
    if not params:
        return
    for t in (*params, *module.buffers(), *_params()):
        _static_keys.add(_key(t)[0])
    live, total, held = {}, {}, {}
    alive = []
    for r in _held:
        h = r()
        if h is None:
            continue
        alive.append(r)
        k, n = _key(h.t)
        if k == 0:
            continue
        total[k] = n
        if k not in _static_keys:
            live[k] = n
            held.setdefault(k, []).append(h.t)
    _held[:] = alive
    graph = sum(_graph_bytes(ts) for ts in held.values())
    k = _state["opt_steps"] + _state["marked"]
    # inside autograd's backward (checkpoint's recomputation): no forward of the loop's
    backward = int(torch._C._current_graph_task_id() != -1)
    print(f"ACT {k} grad={int(torch.is_grad_enabled())} backward={backward} "
          f"bytes={sum(live.values())} graph={graph} all={sum(total.values())}", flush=True)


if os.environ.get("ZOO_ACT") == "1":
    torch.autograd.graph.saved_tensors_hooks(_pack, _unpack).__enter__()
    torch.nn.modules.module.register_module_forward_pre_hook(_pre)
    torch.nn.modules.module.register_module_forward_hook(_post, always_call=True)
