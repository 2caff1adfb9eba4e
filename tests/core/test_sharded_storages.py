"""The storages sharded training juggles, read without raising and counted the same by the
Python paths and the native helpers: a DTensor (FSDP2's parameters, gradients, optimizer
state) counts as its local shard, a storage FSDP freed by resizing it to nothing counts 0.
In one process (gloo, world size 1: FSDP2 still shards into DTensors and frees what it
gathers); the 2-rank jobs are tests/core/test_watch_sharded.py."""

from __future__ import annotations

import csv

import pytest
import torch
import torch.distributed as dist
from torch import nn

import memlens
import memlens.core.native
from memlens.core.native.tracker import make_saved_tracker
from memlens.core.recorder.keys import StorageBytes, storage_key
from memlens.core.recorder.saved import SavedTensorTracker

native = memlens.core.native.load()


@pytest.fixture
def group():
    """A process group of one (no port: an in-memory store), for DTensor and FSDP2."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _dtensor(t: torch.Tensor):
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    return distribute_tensor(t, init_device_mesh("cpu", (1,)), [Shard(0)])


def test_a_dtensor_counts_as_its_shard_and_a_freed_storage_as_nothing(group):
    d = _dtensor(torch.randn(6, 4))
    with pytest.raises(RuntimeError, match="invalid python storage"):
        d.untyped_storage().data_ptr()  # what stopped every FSDP2 recording
    shard = d.to_local()
    assert storage_key(d) == ((-1, shard.untyped_storage().data_ptr()), 96)
    freed = torch.zeros(8)
    freed.untyped_storage().resize_(0)  # as FSDP frees what it gathered
    assert storage_key(freed) == ((-1, 0), 0)
    counted = StorageBytes()
    for t in (d, shard, freed):
        counted.add(t)
    assert counted.total == 96 and counted.keys == {(-1, shard.untyped_storage().data_ptr())}


@pytest.mark.parametrize("tracker", ["python", "native"])
def test_a_dtensor_saved_for_backward_counts_its_shard_and_raises_nothing(group, tracker):
    if tracker == "native" and native is None:
        pytest.skip(f"native helpers unavailable: {memlens.core.native.unavailable_reason()}")
    saved = SavedTensorTracker() if tracker == "python" else make_saved_tracker()
    d = _dtensor(torch.randn(6, 4)).requires_grad_()
    x = _dtensor(torch.randn(6, 4)).requires_grad_()
    with saved.hooks():
        loss = (d * x).sum()  # mul saves both DTensors (each needs the other's gradient)
    assert saved.measure()[0] == 2 * 96  # each its local shard's storage
    loss.backward()
    assert saved.measure()[0] == 0


def _fsdp_run(tmp_path, name: str) -> list[dict[str, str]]:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    fully_shard(model[0])
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    with memlens.watch(out=tmp_path / name):
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 8)).square().mean().backward()
            opt.step()
    with open(tmp_path / name / "memory.csv", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.skipif(native is None, reason="native helpers unavailable")
def test_an_fsdp2_run_has_the_same_figures_with_and_without_the_native_helpers(
        group, tmp_path, monkeypatch):
    fast = _fsdp_run(tmp_path, "native")
    monkeypatch.setattr(memlens.core.native, "load", lambda build=True: None)
    slow = _fsdp_run(tmp_path, "python")
    figures = [c for c in fast[0] if c.endswith("_bytes") and c not in ("heap_bytes",
                                                                           "rss_bytes")]
    assert [(r["step"], r["phase"], *(r[c] for c in figures)) for r in fast] == \
        [(r["step"], r["phase"], *(r[c] for c in figures)) for r in slow]
    assert max(int(r["gathered_bytes"]) for r in fast) > 0  # inside-phase samples seen
    assert int(fast[-1]["params_bytes"]) == 4 * (8 * 16 + 16 + 16 * 2 + 2)  # one rank: all
