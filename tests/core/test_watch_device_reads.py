"""On a GPU the watch reads a step's loss and grad norm at the step's end, not at backward and
before the optimizer step, where each read made the script wait for the GPU
(core/watch/device_reads.py). These tests take that path on CPU tensors (`defer_on_cpu`: the
values copied when they are known, read later) and check its figures against plain torch.
The CUDA side itself (pinned copies, an event) is tools/gpu_check.py's `watch_sync`."""

from __future__ import annotations

import json

import pytest
import torch

from memlens.core import findings
from memlens.core.runfolder.reader import load_run
from memlens.core.watch.device_reads import DeviceRead
from memlens.core.watch.norms import GradNorms
from tests.core.test_watch import HEAD, diagnoses, watch_script
from tests.core.test_watch_diagnoses import CLEARING, MLP, line_of


@pytest.fixture
def gpu_path(monkeypatch):
    """The GPU's reads on CPU tensors: deferred, and the norm taken by torch, not the native
    CPU hook (which a GPU's gradients do not go through)."""
    monkeypatch.setattr(DeviceRead, "defer_on_cpu", True)
    monkeypatch.setattr(GradNorms, "_native_sum_of_squares", lambda self, opt: -1.0)
    made = []
    real = DeviceRead.__init__

    def counting(self, tensors):
        real(self, tensors)
        made.append(self)

    monkeypatch.setattr(DeviceRead, "__init__", counting)
    return made


def test_a_value_read_later_is_the_one_it_had_when_it_was_known(monkeypatch):
    monkeypatch.setattr(DeviceRead, "defer_on_cpu", True)
    t = torch.tensor(1.5)
    read = DeviceRead([t])
    t.add_(1.0)  # changed after backward: the figure is the value backward was given
    assert read.values() == [1.5]


SCALED = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
x, y = torch.randn(32, 8), torch.randn(32, 1)
seen = []
for step in range(5):
    opt.zero_grad()
    losses = []
    for k in range(2):  # accumulation: two backwards a step
        loss = nn.functional.mse_loss(model(x[k::2]), y[k::2]) / 2
        scaler.scale(loss).backward()
        losses.append(loss.item())
    scaler.unscale_(opt)
    norm = torch.linalg.vector_norm(torch.stack(
        [torch.linalg.vector_norm(p.grad.double()) for p in model.parameters()]))
    scaler.step(opt)
    scaler.update()
    seen.append((sum(losses), float(norm)))
print(json.dumps(seen))
"""


def test_deferred_losses_and_norms_are_the_scripts_own(tmp_path, capsys, gpu_path):
    code, _, folder = watch_script(tmp_path, "import json\n" + SCALED)
    assert code == 0
    seen = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    steps = load_run(folder).steps
    # the loss as the script's own .item() read it, GradScaler's factor taken out (steps.csv
    # keeps 6 significant digits)
    assert steps.column("loss").tolist() == pytest.approx([s[0] for s in seen], rel=1e-5)
    assert steps.column("grad_norm").tolist() == pytest.approx([s[1] for s in seen], rel=1e-5)
    # the path taken was the deferred one: two losses and a norm a step, read at its end
    assert len(gpu_path) == 5 * 3


def test_gradients_never_cleared_are_found_at_the_same_line_when_read_late(tmp_path,
                                                                            gpu_path):
    source = MLP + CLEARING.format(zero="pass")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and gpu_path
    found = diagnoses(doc)
    assert [d["key"] for d in found] == [findings.GRADS_NOT_CLEARED]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# STEP')}")


def test_cleared_gradients_raise_nothing_when_read_late(tmp_path, gpu_path):
    code, doc, _ = watch_script(tmp_path, MLP + CLEARING.format(zero="opt.zero_grad()"))
    assert code == 0 and gpu_path and diagnoses(doc) == []


def test_on_cpu_the_norm_of_a_scaled_backward_is_the_unscaled_gradients(tmp_path, capsys):
    """The same script on the CPU's own path (the native hooks' sums): GradScaler's unscale
    changes the gradients in place without a new version, so the sums the hooks took at
    backward are the scaled gradients'; steps.csv's norm is the one the optimizer stepped
    with, the script's own, at every step."""
    code, _, folder = watch_script(tmp_path, "import json\n" + SCALED)
    assert code == 0
    seen = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    steps = load_run(folder).steps
    assert steps.column("grad_norm").tolist() == pytest.approx([s[1] for s in seen], rel=1e-5)
