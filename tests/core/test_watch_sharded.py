"""Sharded and data-parallel training watched on every rank (issue #44): FSDP2 (fully_shard
on each block and the root; reshard_after_forward True and False; blocks under
torch.utils.checkpoint; bf16 MixedPrecisionPolicy; CPUOffloadPolicy; precise mode), FSDP1,
and DDP (its buckets; gradient_as_bucket_view; find_unused_parameters; static_graph), each
with 2 processes on gloo (tests/core/sharded_job.py): under memlens.watch in one torchrun
job, and FSDP2 under `main.py watch` in a second. Every sample of every rank is held to what
plain torch counts at the same moment in the job itself (the local shards' storages, the
live gathered parameters, the gradients, the optimizer state), and `main.py ranks` to the
rank folders' own files."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.core.records import MEMORY_CATEGORIES
from memlens.core.runfolder.ranks import read_job
from memlens.core.units import format_bytes
from tests.core.sharded_job import CLI_CONFIG, CONFIGS, STEPS

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("sharded_job.py")
TORCHRUN = Path(sys.executable).parent / "torchrun"
pytestmark = pytest.mark.skipif(shutil.which("torchrun", path=str(TORCHRUN.parent)) is None,
                                reason="torchrun is not installed next to this Python")
WORLD = 2
# the phase a sample taken inside a phase is named by: the one after the last phase's end
NEXT = {"zero_grad": "forward", "forward": "backward", "backward": "optimizer",
        "optimizer": "forward"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(out: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")}
    done = subprocess.run(
        [str(TORCHRUN), "--nproc_per_node", str(WORLD), "--master_port", str(_free_port()),
         *args], cwd=out, capture_output=True, text=True, timeout=600,
        env={**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded")
    _torchrun(out, str(JOB), str(out), *CONFIGS)
    _torchrun(out, str(ROOT / "main.py"), "watch", "--out", str(out / CLI_CONFIG), str(JOB),
              str(out), CLI_CONFIG)
    return out


def _truth(job: Path, config: str, rank: int) -> dict:
    return json.loads((job / config / f"truth{rank}.json").read_text())


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _samples(job: Path, config: str, rank: int) -> list[dict]:
    """memory.csv's rows after the start, the byte columns as numbers."""
    return [{k: v if k == "phase" else int(float(v)) if v else None for k, v in r.items()}
            for r in _csv(job / config / f"rank{rank}" / "memory.csv") if r["phase"] != "start"]


@pytest.mark.parametrize("config", [*CONFIGS, CLI_CONFIG])
def test_every_rank_records_every_step_and_the_losses_are_the_plain_runs(job, config):
    for rank in range(WORLD):
        folder = job / config / f"rank{rank}"
        doc = json.loads((folder / "run.json").read_text())
        assert (doc["rank"], doc["world_size"]) == (rank, WORLD)
        assert not [e for e in doc["events"] if e["key"] == "memlens stopped recording"]
        assert len(_csv(folder / "steps.csv")) == STEPS == doc["summary"]["steps_done"]
        plain = _truth(job, "fsdp2" if config == CLI_CONFIG else config, rank)["plain"]
        assert _truth(job, config, rank)["watched"] == plain  # the same floats, bit for bit


@pytest.mark.parametrize("config", [*CONFIGS, CLI_CONFIG])
def test_every_sample_is_what_plain_torch_counts_on_that_rank_at_that_moment(job, config):
    for rank in range(WORLD):
        truth = _truth(job, config, rank)
        samples, moments = _samples(job, config, rank), truth["moments"]
        assert len(samples) == len(moments)
        current = "forward"
        for (step, kind, figures), s in zip(moments, samples, strict=True):
            where = (rank, step, kind)
            # a sample inside a phase (FSDP about to free what it gathered) is named by it
            assert (s["step"], s["phase"]) == (step, current if kind == "inside" else kind)
            current = NEXT.get(kind, current)
            assert s["gathered_bytes"] == figures["gathered"], where
            assert s["grads_bytes"] == figures["grads"], where
            if kind == "optimizer":
                assert s["params_bytes"] == figures["params"], where
                assert s["optimizer_bytes"] == figures["optimizer"], where
            if kind == "forward" and truth["activations"] is not None:
                # the full parameters FSDP gathered are parameters, never activations
                assert s["activations_bytes"] == truth["activations"], where
            full = truth["full_param_bytes"]
            if config == "ddp_views":  # the gradients are views into the buckets
                assert s["buckets_bytes"] == full - s["grads_bytes"], where
            else:  # a copy as large as the parameters that train, or none
                assert s["buckets_bytes"] == (full if config.startswith("ddp") else 0), where
            assert s["total_bytes"] == sum(s[f"{c}_bytes"] for c in MEMORY_CATEGORIES)


def test_fsdp_gathers_on_top_of_each_ranks_shard_and_frees_it_again(job):
    for config in ("fsdp2", "fsdp2_keep", "fsdp1"):
        for rank in range(WORLD):
            samples = _samples(job, config, rank)
            assert 0 < samples[-1]["params_bytes"] < _truth(job, config, rank)["full_param_bytes"]
            assert max(s["gathered_bytes"] for s in samples) > 0
            assert all(s["gathered_bytes"] == 0 for s in samples if s["phase"] == "optimizer")
    # reshard_after_forward=False keeps every block's parameters gathered from its forward
    # to its backward; True frees each block's right after its forward
    ends = {c: [s["gathered_bytes"] for s in _samples(job, c, 0) if s["phase"] == "forward"][-1]
            for c in ("fsdp2", "fsdp2_keep")}
    assert ends["fsdp2"] == 0 < ends["fsdp2_keep"]


def test_ranks_shows_each_ranks_shard_and_all_gather_peak_and_names_the_uneven_shard(job):
    figures = read_job(job / "fsdp2")
    peaks, shards = {}, {}
    for r in figures.ranks:
        peaks[r.rank] = max(s["gathered_bytes"] for s in _samples(job, "fsdp2", r.rank))
        shards[r.rank] = _truth(job, "fsdp2", r.rank)["shard_bytes"]
        assert r.gathered_peak == peaks[r.rank]
        assert r.sharding["shard_bytes"] == shards[r.rank]
        assert r.sharding["padded_bytes"] == _samples(job, "fsdp2", r.rank)[-1]["params_bytes"]
    assert shards[0] > shards[1]  # 33 rows over 2 ranks: 17 and 16
    out = subprocess.run([sys.executable, str(ROOT / "main.py"), "ranks", str(job / "fsdp2")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[-5:] == ["shard", "padding", "gathered", "peak", "note"]
    for rank in range(WORLD):
        row = lines[1 + rank]
        assert format_bytes(shards[rank]) in row and format_bytes(peaks[rank]) in row
    sharding = lines[-1]
    assert all(f"rank {r} {format_bytes(peaks[r])}" in sharding for r in range(WORLD))
    assert "uneven shard" in sharding and "inp.weight [33, 8]: 17 | 16 rows" in sharding
    assert f"rank 0's shard holds {format_bytes(shards[0] - shards[1])} more" in sharding
    opt = [_samples(job, "fsdp2", r)[-1]["optimizer_bytes"] for r in range(WORLD)]
    assert f"optimizer state (unpadded) rank 0 {opt[0] / opt[1]:.2f}x rank 1" in sharding
