"""Plain torch's own counts for the toggle tests, made without memlens: runs a script as
`python SCRIPT` would and prints, at the end of each root call of a module with parameters,

  ACT bytes=N     storages saved for backward and still held, each once and whole, less
                  the parameters' and buffers' (what memlens files as activations and
                  AMP casts)

and after each zero_grad call (optimizer or module)

  GRADS bytes=G   the gradients' storages of every module called so far, each once

Usage: python plain_count.py SCRIPT.py [ARGS...] (plain runs only: a second
saved_tensors_hooks would hide memlens's)."""
import runpy
import sys
import weakref

import torch

_held: list = []
_models: dict[int, weakref.ref] = {}
_depth = [0]


class _Held:
    __slots__ = ("__weakref__", "t")


def _pack(t):
    h = _Held()
    h.t = t.detach() if t.requires_grad else t
    _held.append(weakref.ref(h))
    return h


def _key(t):
    return t.untyped_storage().data_ptr()


def _static() -> set:
    keys = set()
    for r in _models.values():
        m = r()
        if m is not None:
            keys |= {_key(t) for t in (*m.parameters(), *m.buffers())}
    return keys


def _pre(module, args):
    _depth[0] += 1


def _post(module, args, out):
    _depth[0] -= 1
    if _depth[0] or next(module.parameters(), None) is None:
        return
    _models[id(module)] = weakref.ref(module)
    static, live = _static(), {}
    alive = []
    for r in _held:
        h = r()
        if h is not None:
            alive.append(r)
            k = _key(h.t)
            if k and k not in static:
                live[k] = h.t.untyped_storage().nbytes()
    _held[:] = alive
    print(f"ACT bytes={sum(live.values())}", flush=True)


def _grads() -> int:
    seen = {}
    for r in _models.values():
        m = r()
        for p in m.parameters() if m is not None else ():
            if p.grad is not None:
                seen[_key(p.grad)] = p.grad.untyped_storage().nbytes()
    return sum(seen.values())


def _counting(original):
    def zero_grad(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        print(f"GRADS bytes={_grads()}", flush=True)
        return out

    return zero_grad


torch.optim.Optimizer.zero_grad = _counting(torch.optim.Optimizer.zero_grad)
torch.nn.Module.zero_grad = _counting(torch.nn.Module.zero_grad)
torch.autograd.graph.saved_tensors_hooks(_pack, lambda h: h.t).__enter__()
torch.nn.modules.module.register_module_forward_pre_hook(_pre)
torch.nn.modules.module.register_module_forward_hook(_post, always_call=True)
sys.argv = sys.argv[1:]
sys.path.insert(0, str(__import__("pathlib").Path(sys.argv[0]).resolve().parent))
runpy.run_path(sys.argv[0], run_name="__main__")
