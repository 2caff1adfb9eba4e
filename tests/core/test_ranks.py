"""A torchrun job's ranks side by side (`main.py ranks DIR`, core.runfolder.ranks): real DDP
jobs on gloo, one node of 2 ranks and two "nodes" of 2 ranks each, every figure checked
against the rank folders' own CSV files read here with the csv module."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import main as memlens_main
from memlens.core.records import MEMORY_CATEGORIES
from memlens.core.runfolder.ranks import read_job
from memlens.core.runfolder.writer import RunWriter
from memlens.core.units import format_bytes

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).parent / "torchrun"
needs_torchrun = pytest.mark.skipif(shutil.which("torchrun", path=str(TORCHRUN.parent)) is None,
                                    reason="torchrun is not installed next to this Python")

# Rank r trains on batches of 16 * (r + 1): its saved activations, so its peak, grow with r.
DDP_SCRIPT = """
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank + 1)
batch = 16 * (rank + 1)
for step in range(4):
    x, y = torch.randn(batch, 8), torch.randn(batch, 1)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")}
    return {**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _torchrun(tmp: Path, nodes: int, extra: list[str]) -> None:
    """The job: `nodes` launchers of 2 processes each, all on this machine, cwd `tmp`."""
    script = tmp / "ddp.py"
    script.write_text(DDP_SCRIPT)
    port = _free_port()
    launchers = [subprocess.Popen(
        [str(TORCHRUN), "--nnodes", str(nodes), "--nproc_per_node", "2", "--node_rank",
         str(n), "--rdzv-endpoint", f"localhost:{port}", *extra,
         str(ROOT / "main.py"), "watch", str(script)],
        cwd=tmp, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for n in range(nodes)]
    for p in launchers:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-3000:]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> Path:
    """2 ranks, no --out and no rendezvous id: the job's folder is named by the launcher."""
    tmp = tmp_path_factory.mktemp("one_node")
    _torchrun(tmp, 1, [])
    (job,) = (tmp / "runs").iterdir()
    return job


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> Path:
    """2 launchers ("nodes") x 2 ranks, no --out, one rendezvous id: one shared folder."""
    tmp = tmp_path_factory.mktemp("two_nodes")
    _torchrun(tmp, 2, ["--rdzv-id", "exp42"])
    (job,) = (tmp / "runs").iterdir()
    return job


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _expected(folder: Path) -> dict:
    """A rank's figures from its files alone."""
    steps = _csv(folder / "steps.csv")
    samples = _csv(folder / "memory.csv")
    ms = [float(r["step_ms"]) for r in steps]
    peaks = [float(r["peak_bytes"]) for r in steps]
    peak = max(peaks)
    peak_step = steps[peaks.index(peak)]["step"]
    in_step = [s for s in samples if s["step"] == peak_step]
    largest = max(in_step, key=lambda s: float(s["total_bytes"]))  # first of equal totals
    return {"steps": len(steps), "peak": peak, "mean": statistics.fmean(ms),
            "p95": statistics.quantiles(ms, n=20, method="inclusive")[18],
            "at_peak": {c: float(largest[f"{c}_bytes"]) for c in MEMORY_CATEGORIES}}


def _cli(capsys, *args) -> tuple[int, str, str]:
    code = memlens_main.main(["ranks", *map(str, args)])
    got = capsys.readouterr()
    return code, got.out, got.err


def _check_job(job: Path, world: int, capsys) -> None:
    figures = read_job(job)
    assert [r.rank for r in figures.ranks] == list(range(world))
    expected = {r: _expected(job / f"rank{r}") for r in range(world)}
    for r in figures.ranks:
        want = expected[r.rank]
        assert r.steps == want["steps"] == 4
        assert r.peak_bytes == want["peak"]
        assert r.mean_step_ms == pytest.approx(want["mean"], rel=1e-12)
        assert r.p95_step_ms == pytest.approx(want["p95"], rel=1e-12)
        assert r.at_peak == want["at_peak"]
        assert r.finished
    peaks = {r: e["peak"] for r, e in expected.items()}
    means = {r: e["mean"] for r, e in expected.items()}
    largest, smallest = max(peaks, key=peaks.get), min(peaks, key=peaks.get)
    slowest = max(means, key=means.get)
    assert largest == world - 1 and smallest == 0  # the largest batch, the smallest batch
    code, out, err = _cli(capsys, job)
    assert code == 0 and err == ""
    lines = out.splitlines()
    rows = {int(line.split()[0]): line for line in lines[1:1 + world]}
    assert sorted(rows) == list(range(world))
    assert "largest" in rows[largest] and "slowest" in rows[slowest]
    assert sum("largest" in row for row in rows.values()) == 1
    assert sum("slowest" in row for row in rows.values()) == 1
    ratio = peaks[largest] / peaks[smallest]
    median = statistics.median(means.values())
    imbalance, ddp = lines[1 + world:]
    assert f"peak max/min {ratio:.2f}x" in imbalance
    assert f"slowest rank {slowest}: " in imbalance
    assert f"{means[slowest] / median:.2f}x the median" in imbalance
    # DDP's buckets: a copy of the gradients, on each rank as large as its parameters
    buckets = {r: float(_csv(job / f"rank{r}" / "memory.csv")[-1]["buckets_bytes"])
               for r in range(world)}
    params = {r: float(_csv(job / f"rank{r}" / "memory.csv")[-1]["params_bytes"])
              for r in range(world)}
    assert buckets == params and ddp.startswith("DDP's gradient buckets: ")
    assert all(f"rank {r} {format_bytes(buckets[r])}" in ddp for r in range(world))


@needs_torchrun
def test_ranks_of_a_two_rank_ddp_job_match_its_csv_files(one_node, capsys):
    assert "none" not in one_node.name and "-watch-ddp-job" in one_node.name
    _check_job(one_node, 2, capsys)
    for r in (0, 1):
        doc = json.loads((one_node / f"rank{r}" / "run.json").read_text())
        assert (doc["rank"], doc["local_rank"], doc["node_rank"]) == (r, r, 0)
        assert doc["host"] == socket.gethostname()


@needs_torchrun
def test_two_nodes_of_two_ranks_share_one_folder_named_by_the_rendezvous_id(two_nodes,
                                                                             capsys):
    assert two_nodes.name == "exp42-watch-ddp"
    _check_job(two_nodes, 4, capsys)
    places = []
    for r in range(4):
        doc = json.loads((two_nodes / f"rank{r}" / "run.json").read_text())
        assert doc["world_size"] == 4
        places.append((doc["node_rank"], doc["local_rank"]))
    assert places == [(0, 0), (0, 1), (1, 0), (1, 1)]
    code, out, _ = _cli(capsys, two_nodes)
    assert code == 0
    header = out.splitlines()[0].split()
    node, local = header.index("node"), header.index("local")
    assert [(int(line.split()[node]), int(line.split()[local]))
            for line in out.splitlines()[1:5]] == places


def test_a_folder_without_rank_folders_exits_2_with_one_line(capsys, tmp_path):
    run = tmp_path / "single"
    RunWriter(run).on_finish({})  # a run folder itself, not a job's
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "empty", run, tmp_path / "missing"):
        code, out, err = _cli(capsys, folder)
        assert code == 2 and out == ""
        assert len(err.splitlines()) == 1 and err.startswith("memlens ranks: ")
        assert str(folder) in err and ("rank folders" in err or "not a folder" in err)


def test_a_damaged_rank_exits_2_naming_its_file(capsys, tmp_path):
    for rank in (0, 1):
        RunWriter(tmp_path / "job" / f"rank{rank}").on_finish({})
    (tmp_path / "job" / "rank1" / "steps.csv").write_text("nonsense\n")
    code, _, err = _cli(capsys, tmp_path / "job")
    assert code == 2 and len(err.splitlines()) == 1
    assert str(tmp_path / "job" / "rank1" / "steps.csv") in err
