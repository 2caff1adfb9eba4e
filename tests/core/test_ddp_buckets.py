"""DDP's buckets in run.json as DDP has them when the run ends: DDP makes its buckets in
parameter order, rebuilds them at the second step's forward in the order the first backward
made gradients, and lists the rebuilt sizes from a later step on. One process (gloo,
world size 1: DDP buckets and rebuilds as on many), compared with DDP's own logging data
and the parameters' bytes."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import memlens


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def sizes(text) -> list[int]:
    return [int(x) for x in str(text or "").split(",") if x.strip()]


@pytest.mark.parametrize("steps", [2, 5])
def test_bucket_sizes_are_the_ones_ddp_has_when_the_run_ends(tmp_path, group, steps):
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(4)],
                        nn.Linear(64, 1))
    ddp = DistributedDataParallel(net, bucket_cap_mb=0.02)  # two buckets of 20 KiB or more
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    with memlens.watch(out=tmp_path / "w"):
        for _ in range(steps):
            opt.zero_grad()
            ddp(torch.randn(4, 64)).sum().backward()
            opt.step()
    facts = json.loads((tmp_path / "w" / "run.json").read_text())["sharding"]
    data = ddp._get_ddp_logging_data()
    rebuilt, first = sizes(data.get("rebuilt_bucket_sizes")), sizes(data.get("bucket_sizes"))
    assert facts["kind"] == "ddp" and facts["buckets_rebuilt"] is ddp._has_rebuilt_buckets
    assert sum(facts["bucket_sizes"]) == sum(p.nbytes for p in net.parameters())
    if rebuilt:  # listed by DDP by the run's end: those, not the first ones
        assert facts["bucket_sizes"] == rebuilt != first
        assert facts["bucket_sizes_from"] == "rebuilt"
    else:
        assert facts["bucket_sizes"] == first and facts["bucket_sizes_from"] == "construction"
