"""What sharded and data-parallel training does to a rank's memory, read from the wrappers'
own state: FSDP2 (`fully_shard`), FSDP1 (`FullyShardedDataParallel`) and DDP's buckets.

- At rest each rank holds a shard of every parameter (FSDP2: a DTensor whose local tensor is
  a view of a padded storage; FSDP1: a flat parameter's local shard): `params` counts those
  storages, padding included (core.recorder.keys unwraps a DTensor to its shard).
- For a block's forward, and again for its backward, FSDP all-gathers the block's full
  parameters into storages it keeps and resizes to nothing when it reshards
  (`storage.resize_(0)`): `gathered` counts those with data now, each storage once.
- DDP copies the gradients into flat buckets for its all-reduce, allocated when the wrapper
  is made and as large as the parameters that train; with `gradient_as_bucket_view=True`
  the gradients are views into them (counted as grads), and only a bucket no gradient
  shows (after `zero_grad(set_to_none=True)`) counts as `buckets`.

FSDP's state is private to torch: each look into it is guarded, and what cannot be read is
left out (a figure of 0, never an error in the user's program). Nothing here keeps a user's
tensor alive: the gathered tensors are held by weak reference.
"""

from __future__ import annotations

import math
import sys
import weakref
from typing import Any

from torch import Tensor, nn

from memlens.core.records import Buckets

# FSDP1 keeps each flat parameter's reduce-scattered gradient here from its post-backward
# hook until backward's end makes it the .grad (FlatParamHandle.prepare_gradient_for_optim).
GRAD_HOLDER_ATTR = "_saved_grad_shard"
UNEVEN_LISTED = 8  # of the unevenly sharded parameters, named in run.json
REBUILT_LOOKS = 16  # steps' ends DDP's logging data is read at for its rebuilt buckets


def _fsdp2_module_type():
    mod = sys.modules.get("torch.distributed.fsdp")  # only where the script imported it
    return getattr(mod, "FSDPModule", None) if mod is not None else None


def _fsdp1_module_type():
    mod = sys.modules.get("torch.distributed.fsdp.fully_sharded_data_parallel")
    return getattr(mod, "FullyShardedDataParallel", None) if mod is not None else None


def _ddp_module_type():
    mod = sys.modules.get("torch.nn.parallel.distributed")
    return getattr(mod, "DistributedDataParallel", None) if mod is not None else None


def _world() -> tuple[int, int]:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # a process group in a state of its own: not ours to ask
        pass
    return 0, 1


def _param_name(fp, names: dict[int, str]) -> str:
    """An FSDP2 parameter's name in its model (`blocks.0.lin.weight`)."""
    info = getattr(fp, "_module_info", None)
    if info is None:
        return str(getattr(fp, "_param_fqn", "") or "?")
    module = names.get(id(info.module), "")
    return f"{module}.{info.param_name}" if module else info.param_name


def _numel(shape) -> int:
    return math.prod(int(n) for n in shape)


class Sharding:
    """How the models found are sharded or replicated, and what that holds now."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "fsdp2" | "fsdp1" | "ddp"
        # Weak references to the tensors whose storages FSDP gathers the full parameters
        # into (the native LightProbe reads this same list at every sample).
        self.gathered_refs: list[weakref.ref] = []
        self._gathered_ids: set[int] = set()
        self._sources: list[weakref.ref] = []  # FSDP2 params / FSDP1 handles to look into
        # Weak references to what holds a gradient in GRAD_HOLDER_ATTR while backward runs
        # (FSDP1's flat parameters; the native LightProbe reads this list too).
        self.grad_holders: list[weakref.ref] = []
        self._waiting = 0  # of those, how many had no gathered storage yet
        self.buckets = Buckets(0, 0)
        self._facts: dict[str, Any] = {"kind": kind}
        self._ddp_pending = False  # DDP's buckets not rebuilt yet (buckets_rebuilt)
        self._rebuilt_looks = 0

    # --- finding it -----------------------------------------------------------------------
    @classmethod
    def of(cls, models: list[nn.Module]) -> Sharding | None:
        """The sharding of `models`, or None where none is sharded or data-parallel."""
        fsdp2, fsdp1, ddp = _fsdp2_module_type(), _fsdp1_module_type(), _ddp_module_type()
        if fsdp2 is None and fsdp1 is None and ddp is None:
            return None
        seen: set[int] = set()  # a module in two models (a LightningModule and its net): once
        modules = [(name, m) for model in models for name, m in model.named_modules()
                   if id(m) not in seen and not seen.add(id(m))]
        try:
            if fsdp2 is not None and any(isinstance(m, fsdp2) for _, m in modules):
                return cls._fsdp2(modules, fsdp2)
            if fsdp1 is not None and any(isinstance(m, fsdp1) for _, m in modules):
                return cls._fsdp1(modules, fsdp1)
            if ddp is not None and any(isinstance(m, ddp) for _, m in modules):
                return cls._ddp([m for _, m in modules if isinstance(m, ddp)])
        except Exception:  # FSDP's private state changed shape: no sharding figures
            return None
        return None

    @classmethod
    def _fsdp2(cls, modules: list, fsdp2: type) -> Sharding:
        s = cls("fsdp2")
        groups = []
        for _, m in modules:
            if isinstance(m, fsdp2):
                group = m._get_fsdp_state()._fsdp_param_group
                if group is not None:
                    groups.append(group)
        params = [fp for g in groups for fp in g.fsdp_params]
        s._sources = [weakref.ref(fp) for fp in params]
        s._waiting = len(params)
        rank, world = _world()
        names = {id(m): name for name, m in modules}
        uneven, full, shard, padded = [], 0, 0, 0
        for fp in params:
            size = fp.sharded_param._local_tensor.element_size()
            full += _numel(fp._orig_size) * size
            shard += _numel(fp.sharded_size) * size
            padded += _numel(fp.padded_sharded_param_size) * size
            dim = fp.fsdp_placement.dim
            if fp._orig_size[dim] % world:
                uneven.append({"name": _param_name(fp, names), "shape": list(fp._orig_size),
                               "dim": dim, "rows": int(fp.sharded_size[dim]),
                               "padded_rows": int(fp.padded_sharded_param_size[dim])})
        dtypes = {str(d).removeprefix("torch.") for fp in params
                  if (d := getattr(getattr(fp, "mp_policy", None), "param_dtype", None))}
        s._facts.update({
            "rank": rank, "world_size": world, "parameters": len(params), "groups": len(groups),
            "full_bytes": full, "shard_bytes": shard, "padded_bytes": padded,
            "uneven": len(uneven), "uneven_params": uneven[:UNEVEN_LISTED],
            "reshard_after_forward": sum(g.post_forward_mesh_info is not None for g in groups),
            "param_dtype": sorted(dtypes),
            "offload": any(getattr(fp, "offload_to_cpu", False) for fp in params)})
        s.refresh()
        return s

    @classmethod
    def _fsdp1(cls, modules: list, fsdp1: type) -> Sharding:
        s = cls("fsdp1")
        flats = [(name, m._handle.flat_param) for name, m in modules
                 if isinstance(m, fsdp1) and m._handle is not None]
        s._sources = [weakref.ref(fp) for _, fp in flats]
        s.grad_holders = list(s._sources)
        s._waiting = len(flats)
        rank, world = _world()
        uneven, full, shard, padded = [], 0, 0, 0
        for name, fp in flats:
            size = fp.element_size()
            local = getattr(fp, "_local_shard", fp)
            pad = int(getattr(fp, "_shard_numel_padded", 0))
            numel = _numel(getattr(fp, "_unpadded_unsharded_size", fp.shape))
            full += numel * size
            padded += local.numel() * size
            shard += (local.numel() - pad) * size
            if numel % world:
                uneven.append({"name": name or "flat_param", "shape": [numel], "dim": 0,
                               "rows": local.numel() - pad, "padded_rows": local.numel()})
        s._facts.update({
            "rank": rank, "world_size": world, "parameters": len(flats), "groups": len(flats),
            "full_bytes": full, "shard_bytes": shard, "padded_bytes": padded,
            "uneven": len(uneven), "uneven_params": uneven[:UNEVEN_LISTED]})
        s.refresh()
        return s

    @classmethod
    def _ddp(cls, wrappers: list) -> Sharding:
        s = cls("ddp")
        fixed = views = 0
        rank, world = _world()
        facts = {"rank": rank, "world_size": world, "bucket_sizes": [],
                 "gradient_as_bucket_view": False, "find_unused_parameters": False,
                 "static_graph": False,
                 # DDP rebuilds its buckets at the second step's forward, and lists their
                 # sizes from a later one: the sizes then (buckets_rebuilt)
                 "buckets_rebuilt": False, "bucket_sizes_from": "construction"}
        s._sources = [weakref.ref(ddp) for ddp in wrappers]
        for ddp in wrappers:
            data = ddp._get_ddp_logging_data()
            sizes = _bucket_sizes(data)
            as_view = bool(data.get("gradient_as_bucket_view", 0))
            if as_view:
                views += sum(sizes)
            else:
                fixed += sum(sizes)
            facts["bucket_sizes"] += sizes
            facts["gradient_as_bucket_view"] |= as_view
            facts["find_unused_parameters"] |= bool(data.get("find_unused_parameters", 0))
            facts["static_graph"] |= bool(data.get("static_graph", 0))
        s.buckets = Buckets(fixed, views)
        s._facts.update(facts)
        s._ddp_pending = bool(s._sources)
        return s

    # --- what it holds ----------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """Every gathered storage is known (FSDP2 makes each at its first all-gather)."""
        return self._waiting == 0

    def refresh(self) -> bool:
        """Looks for gathered storages FSDP made since the last look; True if it found some.
        Once every one is known this costs an attribute check."""
        if not self._waiting:
            return False
        waiting, found = 0, False
        for ref in self._sources:
            source = ref()
            if source is None:
                continue
            tensors = self._gathered_of(source)
            if not tensors or (self.kind == "fsdp2"
                               and getattr(source, "_unsharded_param", None) is None):
                waiting += 1
            for t in tensors:
                if id(t) not in self._gathered_ids:
                    self._gathered_ids.add(id(t))
                    self.gathered_refs.append(weakref.ref(t))
                    found = True
        self._waiting = waiting
        return found

    def _gathered_of(self, source) -> list[Tensor]:
        try:
            if self.kind == "fsdp2":  # the full parameter (its .grad: the full gradient
                return [t for t in (getattr(source, "_unsharded_param", None),  # in backward)
                                    *source.all_gather_outputs,
                                    *getattr(source, "_unsharded_inner_tensors", ()))
                        if isinstance(t, Tensor)]
            return [t for name in ("_full_param_padded", "_full_prec_full_param_padded")
                    if isinstance(t := getattr(source, name, None), Tensor)]
        except Exception:  # a state of FSDP's that is not there yet, or not any more
            return []

    def gathered_tensors(self) -> list[Tensor]:
        return [t for r in self.gathered_refs if (t := r()) is not None]

    def held_grads(self) -> list[Tensor]:
        """The gradients waiting in FSDP1's flat parameters (GRAD_HOLDER_ATTR) now."""
        return [g for r in self.grad_holders if isinstance(
            g := getattr(r(), GRAD_HOLDER_ATTR, None), Tensor)]

    def facts(self) -> dict[str, Any]:
        """What run.json says of it (`sharding`): the kind, the rank's shard and its
        padding, the parameters sharded unevenly, DDP's buckets and options (as they are
        now: DDP rebuilds its buckets once, in the order the first backward made gradients,
        at the second step's forward)."""
        return dict(self._facts)

    def buckets_rebuilt(self) -> bool:
        """At a step's end: DDP's bucket sizes read again once it has rebuilt its buckets
        (its `_has_rebuilt_buckets`: an attribute check until then, nothing after). DDP's
        logging data lists the rebuilt sizes at a later step's forward than the rebuild's:
        it is read at each step's end until it does (REBUILT_LOOKS at most). True when
        this look found them (facts() changed)."""
        if not self._ddp_pending:
            return False
        try:
            wrappers = [w for r in self._sources if (w := r()) is not None]
            if not any(getattr(w, "_has_rebuilt_buckets", False) for w in wrappers):
                return False
            data = [w._get_ddp_logging_data() for w in wrappers]
        except Exception:  # DDP's state changed shape: the sizes it was made with
            self._ddp_pending = False
            return False
        self._rebuilt_looks += 1
        first = not self._facts["buckets_rebuilt"]
        self._facts["buckets_rebuilt"] = True
        if not any(str(d.get("rebuilt_bucket_sizes", "")).strip() for d in data):
            self._ddp_pending = self._rebuilt_looks < REBUILT_LOOKS
            return first
        self._facts["bucket_sizes"] = [n for d in data for n in _bucket_sizes(d)]
        self._facts["bucket_sizes_from"] = "rebuilt"
        self._ddp_pending = False
        return True


def _bucket_sizes(data: dict) -> list[int]:
    """DDP's bucket sizes in bytes: the rebuilt ones once it rebuilt them, else the first."""
    for key in ("rebuilt_bucket_sizes", "bucket_sizes"):
        sizes = [int(x) for x in str(data.get(key, "")).split(",") if x.strip()]
        if sizes:
            return sizes
    return []
