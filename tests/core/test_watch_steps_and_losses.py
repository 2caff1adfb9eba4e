"""What a watched step is and what its loss is (#48): a gradient of an input (a saliency
map, a gradient penalty) is no step and no loss; accelerate's accumulation makes one row
per optimizer step; a step's loss is the sum of what its backwards were given. Truths are
the scripts' own prints, plain torch."""

from __future__ import annotations

import json

import pytest

from memlens.core.runfolder.reader import load_run
from tests.core.test_watch import HEAD, diagnoses, plain, watch_script


def _truth(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _steps(folder):
    return load_run(folder).steps


# --- a saliency map after the last step -----------------------------------------------------

SALIENCY = HEAD + """
import json
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
losses = []
for step in range(4):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
image = x[:1].clone().requires_grad_(True)
{after}
print(json.dumps({{"losses": losses}}))
"""
SALIENCY_MAP = """
score = model(image)[0, 1]
saliency, = torch.autograd.grad(score, image)
print(float(score), float(saliency.abs().sum()))
"""


@pytest.mark.parametrize("after", [SALIENCY_MAP, "pass"])
def test_a_saliency_map_after_training_is_no_step_and_no_loss(tmp_path, capsys, after):
    code, doc, folder = watch_script(tmp_path, SALIENCY.format(after=after))
    truth = _truth(capsys.readouterr().out)
    assert code == 0
    steps = _steps(folder)
    assert len(steps) == 4 == doc["summary"]["steps_done"]
    assert steps.column("loss").tolist() == pytest.approx(truth["losses"], rel=1e-5)
    assert doc["summary"]["final_loss"] == pytest.approx(truth["losses"][-1], rel=1e-6)
    assert diagnoses(doc) == []


GRADIENT_PENALTY = HEAD + """
import json
critic = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
real, fake = torch.randn(32, 8), torch.randn(32, 8)
losses = []
for step in range(5):
    opt.zero_grad()
    t = torch.rand(32, 1)
    mixed = (t * real + (1 - t) * fake).requires_grad_(True)
    grads, = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
    penalty = ((grads.norm(dim=1) - 1) ** 2).mean()
    loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(json.dumps({"losses": losses}))
"""


def test_a_gradient_penalty_is_part_of_the_step_not_its_loss(tmp_path, capsys):
    """WGAN-GP: autograd.grad of the critic's output with respect to its input, inside the
    step, before the loss's backward: the step's loss is the loss backwarded."""
    code, doc, folder = watch_script(tmp_path, GRADIENT_PENALTY)
    truth = _truth(capsys.readouterr().out)
    assert code == 0
    steps = _steps(folder)
    assert steps.column("loss").tolist() == pytest.approx(truth["losses"], rel=1e-5)
    assert diagnoses(doc) == []


# --- a step's loss: the sum of what its backwards were given ---------------------------------

TWO_BACKWARDS = HEAD + """
import json
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
x, y = torch.randn(64, 8), torch.randn(64, 2)
losses = []
for step in range(4):
    opt.zero_grad()
    out = model(x)
    first = nn.functional.mse_loss(out[:, 0], y[:, 0])
    second = nn.functional.l1_loss(out[:, 1], y[:, 1])
    first.backward(retain_graph=True)
    second.backward()
    opt.step()
    losses.append(first.item() + second.item())
print(json.dumps({"losses": losses}))
"""

ACCUMULATED = HEAD + """
import json
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
data = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(12)]
losses, micro = [], []
for i, (x, y) in enumerate(data):
    loss = nn.functional.mse_loss(model(x), y)
    micro.append(loss.item())
    (loss / 4).backward()
    if (i + 1) % 4 == 0:
        opt.step()
        opt.zero_grad()
        losses.append(sum(micro) / 4)
        micro = []
print(json.dumps({"losses": losses}))
"""

LBFGS = HEAD + """
import json
model = nn.Linear(4, 1)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
x, y = torch.randn(32, 4), torch.randn(32, 1)
losses = []
def closure():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss
for step in range(3):
    losses.append(opt.step(closure).item())  # what step(closure) returns: the first
print(json.dumps({"losses": losses}))
"""


@pytest.mark.parametrize("source", [TWO_BACKWARDS, ACCUMULATED, LBFGS],
                         ids=["two backwards: their sum", "loss / 4: the mean",
                              "LBFGS: its closure's first evaluation"])
def test_a_steps_loss_is_the_sum_of_what_its_backwards_were_given(tmp_path, capsys, source):
    code, _doc, folder = watch_script(tmp_path, source)
    truth = _truth(capsys.readouterr().out)
    assert code == 0
    assert _steps(folder).column("loss").tolist() == pytest.approx(truth["losses"], rel=1e-5)


# --- accelerate's accumulate() ---------------------------------------------------------------

ACCELERATE = HEAD + """
import json
from accelerate import Accelerator
from torch.optim.optimizer import register_optimizer_step_post_hook
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
stepped = []  # the plain SGD's own steps, counted by torch's global post-hook
register_optimizer_step_post_hook(
    lambda o, a, k: stepped.append(1) if type(o) is torch.optim.SGD else None)
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
model, opt, loader = accelerator.prepare(model, opt, loader)
losses, micro = [], []
for x, y in loader:
    with accelerator.accumulate(model):
        loss = nn.functional.mse_loss(model(x), y)
        micro.append(loss.item())
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        if accelerator.sync_gradients:
            losses.append(sum(micro) / len(micro))
            micro = []
print(json.dumps({"losses": losses, "stepped": len(stepped)}))
"""


def test_accelerate_accumulate_makes_a_row_per_optimizer_step(tmp_path, capsys):
    pytest.importorskip("accelerate")
    code, doc, folder = watch_script(tmp_path, ACCELERATE)
    truth = _truth(capsys.readouterr().out)
    assert code == 0 and truth["stepped"] == 4  # 8 micro-batches, 2 a step
    steps = _steps(folder)
    assert len(steps) == truth["stepped"]
    # each row: both of its micro-batches (accelerate backwards loss / 2: their mean)
    assert steps.column("loss").tolist() == pytest.approx(truth["losses"], rel=1e-5)
    assert all(ms > 0 for ms in steps.column("forward_ms").tolist())
    assert all(ms > 0 for ms in steps.column("backward_ms").tolist())
    assert diagnoses(doc) == []


def test_the_same_accumulation_plain_gives_the_same_rows(tmp_path, capsys):
    """The clean twin: the loop without accelerate, written by hand."""
    code, _, folder = watch_script(tmp_path, ACCUMULATED)
    truth = _truth(capsys.readouterr().out)
    assert code == 0 and len(_steps(folder)) == len(truth["losses"]) == 3


def test_watched_and_plain_print_the_same(tmp_path, capsys):
    """The saliency, penalty and LBFGS scripts give the user the same numbers watched."""
    for source in (SALIENCY.format(after=SALIENCY_MAP), GRADIENT_PENALTY, LBFGS):
        plain(tmp_path, source)
        alone = capsys.readouterr().out
        watch_script(tmp_path, source, out=f"run{hash(source) % 1000}")
        assert capsys.readouterr().out == alone
