"""The watch on code as people write it (issue #29): each defect the hidden-script audit met,
as the bug and its clean twin. Figures are checked against plain torch, counted here."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from memlens.core import findings
from memlens.core.findings import GRAPH_GROWS
from memlens.core.runfolder.reader import load_run
from memlens.core.watch.script import run_script
from tests.core.test_watch import ADAM_LOOP, HEAD, diagnoses, plain, watch_script, write

ROOT = Path(__file__).resolve().parents[2]


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def keys(doc: dict) -> list[str]:
    return sorted(d["key"] for d in diagnoses(doc))


# --- 1. a run folder is never written twice -----------------------------------------------


def test_watch_out_on_a_folder_holding_a_run_is_refused_and_the_run_kept(tmp_path, capsys):
    path = write(tmp_path, ADAM_LOOP)
    out = tmp_path / "run"
    assert run_script(str(path), ["3"], out=out, quiet=True) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert run_script(str(path), ["5"], out=out, quiet=True) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a run" in err[0] and "--force" in err[0]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert run_script(str(path), ["5"], out=out, quiet=True, force=True) == 0
    assert len(load_run(out).steps) == 5


def test_two_watches_started_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    from memlens.core.watch.api import Watch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20261202-120000")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    folders = []
    for steps in (3, 5):
        w = Watch(script="train.py")
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
        w.close()
        folders.append(w.folder)
    assert folders[0] != folders[1] and folders[0].parent == folders[1].parent
    for folder, steps in zip(folders, (3, 5), strict=True):
        doc = json.loads((folder / "run.json").read_text())
        assert doc["summary"]["steps_done"] == steps == len(load_run(folder).steps)


def _torchrun_env(run_id: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(TORCHELASTIC_RUN_ID=run_id, LOCAL_RANK="0", RANK="0", WORLD_SIZE="2",
               PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    return env


def test_under_torchrun_without_out_a_job_has_its_own_folder_never_none(tmp_path):
    """torchrun's default rendezvous id is "none": a folder named after it would be every
    job's. A rank of a job (faked: its environment) writes runs/<time>-watch-<stem>-job<pid>/
    rank0; a second job of the same launcher finds that rank's folder taken: refused."""
    path = write(tmp_path, ADAM_LOOP)
    cmd = [sys.executable, str(ROOT / "main.py"), "watch", str(path), "2"]
    first = subprocess.run(cmd, cwd=tmp_path, env=_torchrun_env("none"), capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    jobs = list((tmp_path / "runs").iterdir())
    assert len(jobs) == 1 and "none" not in jobs[0].name and "watch-train" in jobs[0].name
    assert len(load_run(jobs[0] / "rank0").steps) == 2
    again = subprocess.run(cmd, cwd=tmp_path, env=_torchrun_env("none"), capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert len(load_run(jobs[0] / "rank0").steps) == 2  # the first job's run, untouched
    named = subprocess.run(cmd, cwd=tmp_path, env=_torchrun_env("exp7"), capture_output=True,
                           text=True, timeout=300)
    assert named.returncode == 0 and (tmp_path / "runs" / "exp7-watch-train" / "rank0").is_dir()


# --- 2. a batch sliced from a data set -----------------------------------------------------

SLICES = HEAD + """
X, Y = torch.randn(4096, 20), torch.randn(4096, 1)  # 320 KiB of data, held by the script
model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(6):
    xb, yb = X[i * 32:(i + 1) * 32], Y[i * 32:(i + 1) * 32]
    opt.zero_grad()
    nn.functional.mse_loss(model(xb), yb).backward()
    opt.step()
"""


def test_a_batch_sliced_from_a_data_set_counts_what_its_graph_saves(tmp_path):
    code, _, folder = watch_script(tmp_path, SLICES)
    assert code == 0
    # plain torch: what one forward saves, by hand: the batch (a view: 32 rows of 20
    # floats), Linear's input to the second layer and ReLU's output (32 x 16 floats each,
    # one storage: ReLU's output is that input), the weights left out
    saved = 32 * 20 * 4 + 32 * 16 * 4
    history = load_run(folder)
    cols = history.samples.columns
    from memlens.core.records import SAMPLE_PHASE_CODE

    rows = list(history.samples.rows())
    at = {name: cols.index(name) for name in ("step", "phase", "activations", "other")}
    forward = [r for r in rows if r[at["phase"]] == SAMPLE_PHASE_CODE["forward"]]
    assert len(forward) == 6
    assert {r[at["activations"]] for r in forward} == {saved}
    # The data set is the script's: `other` (the model's inputs), once the model has been
    # called with a slice of it; the part the graph saved is activations meanwhile.
    data = X_BYTES = 4096 * 20 * 4
    code = SAMPLE_PHASE_CODE
    later = {r[at["other"]] for r in rows if r[at["step"]] >= 1 and r[at["phase"]] in (
        code["forward"], code["backward"], code["optimizer"])}
    assert later == {X_BYTES, data - 32 * 20 * 4}


# --- 3. a graph that grows step after step ---------------------------------------------------

GROWING = HEAD + """
rnn, head = nn.RNN(4, 8), nn.Linear(8, 1)
params = list(rnn.parameters()) + list(head.parameters())
xs = torch.randn(12, 5, 3, 4)
hidden = torch.zeros(1, 3, 8)
for step in range(12):
    {detach}
    out, hidden = rnn(xs[step], hidden)  # CALL
    loss = head(out).pow(2).mean()
    loss.backward(retain_graph=True)
    for p in params:  # word_language_model's hand-written SGD: .data, no version bump
        p.data.add_(p.grad, alpha=-0.01)
        p.grad = None
"""


def test_6_a_graph_that_grows_every_step_names_the_carried_state(tmp_path):
    source = GROWING.format(detach="pass")
    code, doc, folder = watch_script(tmp_path, source)
    assert code == 0
    found = diagnoses(doc, GRAPH_GROWS)
    assert len(found) == 1
    d = found[0]
    assert "`hidden`" in d["message"] and "rnn" in d["message"]
    assert d["where"].endswith(f"train.py:{line_of(source, '# CALL')}")
    assert "detach()" in d["fix"]
    nodes = load_run(folder).steps.column("graph_nodes")
    assert all(b > a for a, b in itertools.pairwise(nodes))  # it does grow
    assert keys(doc) == [GRAPH_GROWS]


def test_6_clean_with_detach(tmp_path):
    code, doc, folder = watch_script(tmp_path, GROWING.format(detach="hidden = hidden.detach()"))
    assert code == 0 and diagnoses(doc) == []
    nodes = load_run(folder).steps.column("graph_nodes")
    assert len(set(nodes)) == 1


def test_6_clean_when_the_graph_grows_because_sequences_do(tmp_path):
    """A curriculum: each step's sequence is longer, so its graph has more nodes, but
    nothing is carried and nothing held: not this bug."""
    source = HEAD + """
rnn = nn.RNNCell(4, 8)
opt = torch.optim.SGD(rnn.parameters(), lr=0.01)
for step in range(8):
    h = torch.zeros(3, 8)
    opt.zero_grad()
    for t in range(step + 2):
        h = rnn(torch.randn(3, 4), h)
    h.pow(2).mean().backward()
    opt.step()
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and diagnoses(doc) == []


# --- 4. false alarms -------------------------------------------------------------------------


def test_update_bn_is_not_validation_in_train_mode(tmp_path):
    source = HEAD + """
from torch.optim.swa_utils import AveragedModel, update_bn
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
swa_model = AveragedModel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(4)]
for epoch in range(2):
    for x, y in data:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    swa_model.update_parameters(model)
update_bn(((x,) for x, _ in data), swa_model)
"""
    code, doc, folder = watch_script(tmp_path, source)
    assert code == 0 and diagnoses(doc) == [], doc["models"]
    print(doc["models"])
    # the averaged copy's weights exist from the start: counted from the first row on
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    per_copy = sum(p.numel() * p.element_size() for p in net.parameters())
    params = load_run(folder).samples.column("params")
    assert set(params[1:]) == {2 * per_copy}


def test_5_still_found_for_batchnorm_validation_in_train_mode(tmp_path):
    source = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(16, 8), torch.randn(16, 1)
for step in range(3):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    with torch.no_grad():
        model(x)  # EVAL
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and keys(doc) == [findings.EVAL_IN_TRAIN_MODE]


MANUAL_GRADS = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
params = list(model.parameters())
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(5):
    loss = nn.functional.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, params)
    for p, g in zip(params, grads):
        p.grad = g  # replaced every step: cleared, in effect
    opt.step()
    print(repr(loss.item()))
"""


def test_grads_assigned_from_autograd_grad_are_a_backward_and_no_alarm(tmp_path, capsys):
    plain(tmp_path, MANUAL_GRADS)
    losses = [float(v) for v in capsys.readouterr().out.split()]
    code, doc, folder = watch_script(tmp_path, MANUAL_GRADS)
    assert code == 0 and diagnoses(doc) == []
    steps = load_run(folder).steps
    assert steps.column("loss") == pytest.approx(losses, rel=1e-5)  # autograd.grad's loss
    assert (steps.column("backward_ms") > 0).all()


def test_no_diagnosis_1_after_a_backward_that_failed(tmp_path, capsys):
    source = HEAD + """
model = nn.Linear(4, 1)
x = torch.randn(8, 4)
out = model(x)
loss = out.detach().sum()  # detached by mistake: backward refuses
loss.backward()
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 1
    assert "does not require grad" in capsys.readouterr().err
    assert diagnoses(doc) == []


# --- 5. the holders of kept graphs -----------------------------------------------------------

KEPT_OUTPUTS = HEAD + """
model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 4)
xv = torch.randn(128, 8)
{holder} = []
for step in range(6):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    {ctx}
        out = model(xv)  # VAL
        {holder}.append(out)  # KEEP
"""


@pytest.mark.parametrize("holder", ["all_preds", "samples"])
def test_1_kept_validation_outputs_name_their_holder_and_its_growth(tmp_path, holder):
    source = KEPT_OUTPUTS.format(holder=holder, ctx="if True:")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0
    found = diagnoses(doc, findings.GRAD_NOT_BACKWARDED)
    assert len(found) == 1, [(d["step"], d["where"], d["message"]) for d in found]
    d = found[0]
    assert f"`{holder}`" in d["message"] and "a step" in d["message"]
    assert d["where"].endswith(f"train.py:{line_of(source, '# KEEP')}")
    # plain torch: what the kept forwards save, each storage once (the input they share
    # once), weights out; the calls alive when it is reported, and one call's more a step
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    xv = torch.randn(128, 8)

    def saved_by(n: int) -> int:
        seen: dict[int, int] = {}

        def pack(t):
            if t.untyped_storage().data_ptr() not in weights:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            kept = [model(xv) for _ in range(n)]
        del kept
        return sum(seen.values())

    calls = int(d["message"].split("held the graphs of ")[1].split()[0])
    assert calls >= 2 and d["bytes"] == saved_by(calls)
    assert f"+{(saved_by(2) - saved_by(1)) / 1024:.1f} KiB a step" in d["message"]


def test_1_clean_when_kept_outputs_are_made_under_no_grad(tmp_path):
    source = KEPT_OUTPUTS.format(holder="all_preds", ctx="with torch.no_grad():")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and diagnoses(doc) == []


def test_1_a_list_of_validation_losses_names_the_list(tmp_path):
    source = HEAD + """
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
def validate():
    total_loss = 0
    for _ in range(2):
        total_loss += nn.functional.mse_loss(model(x), y)
    return total_loss
history = []
for step in range(5):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    history.append(validate())  # KEEP
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0
    found = diagnoses(doc, findings.GRAD_NOT_BACKWARDED)
    assert len(found) == 1 and "`history`" in found[0]["message"]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# KEEP')}")


def test_2_an_accumulation_written_as_an_assignment_points_at_that_line(tmp_path):
    source = HEAD + """
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
def train_epoch():
    epoch_loss = 0.0
    for step in range(6):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        epoch_loss = epoch_loss + loss  # ACC
    return epoch_loss.item()
train_epoch()
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0
    found = diagnoses(doc, findings.GRAPH_KEPT)
    assert len(found) == 1 and "`epoch_loss`" in found[0]["message"]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# ACC')}")


def test_2_clean_when_one_loss_is_held_across_an_epoch(tmp_path):
    """mnist's `return loss` from train(), read with .item() after test(): one backwarded
    loss alive a while, nothing saved and nothing growing: no graph is being kept."""
    source = HEAD + """
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
def train():
    for step in range(4):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return loss
for epoch in range(3):
    loss = train()
    with torch.no_grad():
        model(x)
    print(loss.item())
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and diagnoses(doc) == []


# --- 6. the user's error text, exactly -------------------------------------------------------

IN_PLACE = HEAD + """
lin = nn.Linear(4, 4)
h = lin(torch.randn(2, 4))
y = h.sigmoid()
z = y * 3
y.add_(1)  # changes what mul saved
z.sum().backward()
"""


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_the_in_place_error_reads_as_without_memlens(tmp_path):
    path = write(tmp_path, IN_PLACE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    plain_run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                               env=env, timeout=300)
    watched = subprocess.run([sys.executable, str(ROOT / "main.py"), "watch", str(path),
                              "--out", str(tmp_path / "run")], capture_output=True, text=True,
                             env=env, timeout=300)
    assert plain_run.returncode == watched.returncode == 1
    line = _last_line(plain_run.stderr)
    assert "which is output 0 of" in line and "Hint:" in line
    assert line in watched.stderr.splitlines()


def test_4_the_in_place_form_of_carried_state(tmp_path, capsys):
    """Carried state with retain_graph=True and an optimizer that updates in place: the
    second backward meets weights the first step's graph saved, now changed."""
    source = HEAD + """
rnn, head = nn.RNN(4, 8), nn.Linear(8, 1)
opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), lr=0.01)
xs = torch.randn(4, 5, 3, 4)
hidden = torch.zeros(1, 3, 8)
for step in range(4):
    opt.zero_grad()
    out, hidden = rnn(xs[step], hidden)  # CALL
    head(out).pow(2).mean().backward(retain_graph=True)
    opt.step()
"""
    code, doc, folder = watch_script(tmp_path, source)
    assert code == 1 and "modified by an inplace operation" in capsys.readouterr().err
    found = diagnoses(doc, findings.STATE_NOT_DETACHED)
    assert len(found) == 1 and "detach()" in found[0]["fix"]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# CALL')}")
    # the step the error cut short is no step: one optimizer step was made
    assert doc["summary"]["steps_done"] == 1 == len(load_run(folder).steps)
    assert any(e["key"] == "step cut short" for e in doc["events"])


# --- 8. the API and the command line ----------------------------------------------------------


def test_memlens_watch_in_code_says_what_it_found_at_close(tmp_path, capsys):
    import memlens

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    with memlens.watch(out=tmp_path / "run") as w:
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            model(x).sum().item()  # validation under grad
    err = capsys.readouterr().err
    assert f"3 steps recorded in {w.folder}" in err
    assert "diagnosis: model forward under grad is never backwarded" in err
    with memlens.watch(out=tmp_path / "quiet", quiet=True):
        model(x).sum().backward()
    assert capsys.readouterr().err == ""


def test_script_arguments_need_no_double_dash(tmp_path):
    path = write(tmp_path, ADAM_LOOP.replace("int(sys.argv[1])", "int(sys.argv[2])").replace(
        "import sys", "import sys\nassert sys.argv[1] == '--epochs', sys.argv"))
    p = subprocess.run([sys.executable, str(ROOT / "main.py"), "watch", str(path), "--epochs",
                        "3", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert len(load_run(tmp_path / "run").steps) == 3
