"""Who keeps an old graph, as the watch names it: an attribute a module caches on itself
(a loss module's history), and never memlens itself: reading a function frame's locals
(Python < 3.13 caches them on the frame) keeps nothing of the script alive."""

from __future__ import annotations

import csv

from memlens.core import findings as dx
from tests.core.test_watch import HEAD, diagnoses, plain, watch_script

TRACKED_LOSS = HEAD + """
class TrackedLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, pred, target):
        loss = nn.functional.mse_loss(pred, target)
        self.history.append(loss)  # CACHE
        return loss


model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
criterion = TrackedLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 8), torch.randn(16, 1)
for step in range(5):
    opt.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    opt.step()
"""


def test_a_loss_module_caching_its_losses_is_named_at_the_line_that_caches(tmp_path):
    code, doc, _ = watch_script(tmp_path, TRACKED_LOSS)
    assert code == 0
    found = diagnoses(doc, dx.GRAPH_KEPT)
    assert len(found) == 1
    assert "attribute `criterion.history`" in found[0]["message"]  # the script's loss module
    line = next(i for i, t in enumerate(TRACKED_LOSS.splitlines(), 1) if "# CACHE" in t)
    assert found[0]["where"].endswith(f"train.py:{line}")


TWO_LOSSES_IN_A_FUNCTION = HEAD + """
def main():
    trunk, head = nn.Linear(8, 8), nn.Linear(8, 2)
    opt = torch.optim.SGD([*trunk.parameters(), *head.parameters()], lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 2)
    for step in range(6):
        opt.zero_grad()
        loss_a = nn.functional.mse_loss(head(trunk(x)), y)
        loss_a.backward()
        loss_b = nn.functional.mse_loss(trunk(x)[:, :2], y)
        loss_b.backward()
        opt.step()


main()
"""


def test_no_graph_kept_where_only_memlens_read_the_functions_locals(tmp_path):
    """Python 3.11: reading a frame's f_locals (to name a model) leaves a snapshot on the
    frame that holds that moment's losses until the next read: not the program's holder."""
    code, doc, _ = watch_script(tmp_path, TWO_LOSSES_IN_A_FUNCTION)
    assert code == 0
    assert diagnoses(doc) == []


FIRST_LOSS_FREED = HEAD + """
import weakref


def main():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    first = None
    for step in range(4):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward(retain_graph=True)
        opt.step()
        if first is None:
            first = weakref.ref(loss)
    print("first loss freed:", first() is None)


main()
"""


def test_memlens_keeps_no_tensor_of_the_script_alive_through_a_frames_locals(tmp_path,
                                                                             capsys):
    plain(tmp_path, FIRST_LOSS_FREED)
    assert capsys.readouterr().out.strip() == "first loss freed: True"
    code, _, folder = watch_script(tmp_path, FIRST_LOSS_FREED)
    assert code == 0 and capsys.readouterr().out.strip() == "first loss freed: True"
    # and what a step keeps for backward (retain_graph) is one step's, every step
    with open(folder / "steps.csv", newline="") as fh:
        retained = [int(r["retained_bytes"]) for r in csv.DictReader(fh)]
    assert len(set(retained)) == 1 and retained[0] > 0
