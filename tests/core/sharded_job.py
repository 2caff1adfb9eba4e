"""A sharded or data-parallel job for tests/core/test_watch_sharded.py, run by torchrun with 2
processes (gloo, CPU): python sharded_job.py OUT CONFIG [CONFIG ...].

Each configuration trains STEPS steps plain, then again from the same seed under
`memlens.watch(out=OUT/CONFIG)`, and writes OUT/CONFIG/truth<rank>.json: both runs' losses
and, at each moment memlens takes a sample, what plain torch counts there: the parameters'
local shards (DTensor.to_local()), the gradients' and the optimizer state's local shards,
the live gathered parameters (untyped_storage().nbytes() of the full parameters FSDP has
put in the modules), each storage once. The moments: the end of forward, backward,
optimizer step and zero_grad, and (FSDP) just before FSDP frees a block's gathered
parameters, taken by wrapping FSDP's reshard here, before memlens wraps it. A configuration
named *_cli runs once, not watched here: the job runs under `main.py watch --out OUT/CONFIG`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import memlens

STEPS = 2
DIM = 33  # not divisible by 2: every block's shard is uneven
CONFIGS = ("fsdp2", "fsdp2_keep", "fsdp2_ckpt", "fsdp2_bf16", "fsdp2_offload", "fsdp2_precise",
           "fsdp1", "ddp", "ddp_views", "ddp_unused", "ddp_static")
CLI_CONFIG = "fsdp2_cli"  # FSDP2 as "fsdp2", recorded by main.py watch


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(DIM, DIM)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Net(nn.Module):
    def __init__(self, ckpt: bool = False, unused: bool = False) -> None:
        super().__init__()
        self.inp = nn.Linear(8, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.out = nn.Linear(DIM, 1)
        self.unused = nn.Linear(DIM, DIM) if unused else None  # never called
        self.ckpt = ckpt

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:  # under activation checkpointing, or not
            x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False) if self.ckpt \
                else b(x)
        return self.out(x)


def build(config: str) -> nn.Module:
    torch.manual_seed(0)
    net = Net(ckpt="ckpt" in config, unused="unused" in config)
    if config.startswith("fsdp2"):  # fully_shard on each block and on the root
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        kw = {"reshard_after_forward": "keep" not in config}
        if "bf16" in config:
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
        if "offload" in config:
            kw["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
        for b in net.blocks:
            fully_shard(b, **kw)
        return fully_shard(net, **kw)
    if config == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        return FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy({Block}),
                                        device_id=torch.device("cpu"))
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(net, gradient_as_bucket_view="views" in config,
                                   find_unused_parameters="unused" in config,
                                   static_graph="static" in config)


def local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def storage_bytes(tensors) -> int:
    """Each storage once, by its data pointer; a freed one (0 bytes) holds nothing."""
    seen: dict[int, int] = {}
    for t in tensors:
        st = local(t).untyped_storage()
        if st.data_ptr():
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


class Truth:
    """What plain torch counts at the moments memlens samples."""

    def __init__(self, model: nn.Module, opt, config: str) -> None:
        self.model, self.opt, self.config = model, opt, config
        self.moments: list[list] = []
        self.step = 0
        # FSDP1's flat parameters at rest hold their shard; while gathered, the full one
        self.rest = {id(p): local(p).untyped_storage().data_ptr() for p in model.parameters()}

    def gathered(self) -> int:
        from torch.distributed.tensor import DTensor

        params = list(self.model.parameters())
        if self.config.startswith("fsdp2"):  # the full parameters FSDP put in the modules
            return storage_bytes(p for p in params if not isinstance(p, DTensor))
        if self.config == "fsdp1":  # a flat parameter off its shard: the gathered one; a
            return storage_bytes(  # root's kept while its flat parameter is back on it
                [p for p in params if local(p).untyped_storage().data_ptr() != self.rest[id(p)]]
                + [p._full_param_padded for p in params if hasattr(p, "_full_param_padded")])
        return 0

    def grads(self) -> int:
        """The gradients: .grad, and in a backward FSDP1's reduce-scattered shards, which
        wait in their flat parameter's `_saved_grad_shard` until backward's end."""
        params = list(self.model.parameters())
        return storage_bytes([p.grad for p in params if p.grad is not None]
                             + [g for p in params
                                if (g := getattr(p, "_saved_grad_shard", None)) is not None])

    def note(self, kind: str) -> None:
        figures = {"gathered": self.gathered(), "grads": self.grads()}
        if kind == "optimizer":
            figures["params"] = storage_bytes(self.model.parameters())
            figures["optimizer"] = storage_bytes(
                v for s in self.opt.state.values() for v in s.values()
                if isinstance(v, torch.Tensor))
        self.moments.append([self.step, kind, figures])


@contextlib.contextmanager
def reshard_noted(truth: Truth | None):
    """FSDP's reshard wrapped to note the moment before it frees (as memlens samples)."""
    if truth is None or truth.config.startswith("ddp"):
        yield
        return
    if truth.config == "fsdp1":
        from torch.distributed.fsdp import _runtime_utils as owner

        original, name = owner._reshard, "_reshard"

        def wrapper(state, handle, free, *args, **kwargs):
            if free:
                truth.note("inside")
            return original(state, handle, free, *args, **kwargs)
    else:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import (
            FSDPParamGroup as owner,
        )

        original, name = owner.reshard, "reshard"

        def wrapper(group, *args, **kwargs):
            keeps = group._training_state.name == "FORWARD" and not group._reshard_after_forward
            if group.is_unsharded and not keeps:
                truth.note("inside")
            return original(group, *args, **kwargs)
    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


def activations(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd saves for backward in one forward, each storage once, counted at the
    forward's end: what saved_tensors_hooks see, less parameters (a leaf that requires
    grad, or a view of one: FSDP's gathered ones too) and storages freed by then."""
    saved: list[torch.Tensor] = []

    def pack(t):
        base = t._base if t._base is not None else t
        if not (base.requires_grad and base.grad_fn is None):
            saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    n = storage_bytes(saved)
    out.sum().backward()
    model.zero_grad(set_to_none=True)
    return n


def train(config: str, out: Path | None) -> tuple[list[float], Truth | None, int | None]:
    """`out`: watch the run into it (None: plain; for CLI_CONFIG the outer watch records)."""
    model = build(config)
    rank = dist.get_rank()
    outer = config == CLI_CONFIG  # its one pass is the recording: no pass before it
    acts = None if outer else activations(model, torch.randn(16, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    torch.manual_seed(1 + rank)
    truth = Truth(model, opt, config) if out is not None else None
    watch = (memlens.watch(out=out, precise="precise" in config)
             if out is not None and not outer else contextlib.nullcontext())
    losses = []
    with reshard_noted(truth), watch:
        for step in range(STEPS):
            x, y = torch.randn(16, 8), torch.randn(16, 1)
            opt.zero_grad()
            if truth:
                truth.step = step
                if step:
                    truth.note("zero_grad")
            pred = model(x)
            if truth:
                truth.note("forward")
            loss = nn.functional.mse_loss(pred, y)
            loss.backward()
            if truth:
                truth.note("backward")
            opt.step()
            if truth:
                truth.note("optimizer")
            losses.append(loss.item())
    return losses, truth, acts


def main() -> None:
    dist.init_process_group("gloo")
    out = Path(sys.argv[1])
    for config in sys.argv[2:]:
        plain = train(config, None)[0] if config != CLI_CONFIG else []
        watched, truth, acts = train(config, out / config)
        full = sum(p.numel() * 4 for p in Net(unused="unused" in config).parameters()
                   if p.requires_grad)
        shard = sum(local(p).nbytes for p in truth.model.parameters())  # without padding
        doc = {"plain": plain, "watched": watched, "moments": truth.moments,
               "activations": acts, "full_param_bytes": full, "shard_bytes": shard,
               "world_size": dist.get_world_size()}
        (out / config / f"truth{dist.get_rank()}.json").write_text(json.dumps(doc))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
