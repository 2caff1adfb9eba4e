"""Who keeps an old graph, as the watch names it: an attribute a module caches on itself
(a loss module's history), and never memlens's own snapshot of a frame's locals."""

from __future__ import annotations

from memlens.core.watch import diagnoses as dx
from tests.core.test_watch import HEAD, diagnoses, watch_script

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
    assert "attribute `self.history` of TrackedLoss" in found[0]["message"]
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
