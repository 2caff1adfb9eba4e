"""The idioms frameworks use, written plainly: `optimizer.step(closure)` (Lightning, LBFGS),
`step(closure=None)` (accelerate), clip_grad_norm_ before the step, and keyword inputs
(`model(input_ids=..., labels=...)`, every Hugging Face model). Each is compared with what
plain torch counts in the script."""

from __future__ import annotations

import json
import math

import pytest

from memlens.core.records import SAMPLE_PHASE_CODE
from memlens.core.runfolder.reader import load_run
from tests.core.test_watch import HEAD, plain, watch_script

# SGD stepped with a closure that zeroes, runs forward and backward (the LBFGS idiom, and
# Lightning's). With ACCUM > 1, the first ACCUM - 1 micro-batches run before the step and
# the last inside its closure, as Lightning's accumulate_grad_batches does. The script
# prints its own truth: each step's loss (what its backwards were given, added up: the mean
# of the micro-batches' losses) and the norm of the gradients the optimizer stepped, read by
# a plain torch post-hook (SGD leaves .grad as backward made it).
CLOSURE_LOOP = HEAD + """
import json
from torch.optim.optimizer import register_optimizer_step_post_hook
ACCUM, STEPS = int(sys.argv[1]), int(sys.argv[2])
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
norms, losses = [], []
register_optimizer_step_post_hook(lambda o, a, k: norms.append(
    torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()))
data = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(STEPS * ACCUM)]
for step in range(STEPS):
    total = 0.0
    for micro in range(ACCUM - 1):
        x, y = data[step * ACCUM + micro]
        if micro == 0:
            opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        total += loss.item()
        (loss / ACCUM).backward()
    x, y = data[step * ACCUM + ACCUM - 1]
    def closure():
        if ACCUM == 1:
            opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y) / ACCUM
        loss.backward()
        return loss
    losses.append(total / ACCUM + opt.step(closure).item())
print(json.dumps({"norms": norms, "losses": losses,
                  "params": [p.detach().flatten().tolist() for p in model.parameters()]}))
"""


def _truth(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("accum", [1, 4])
def test_forty_closure_steps_read_this_steps_norm_and_raise_no_false_alarm(
        tmp_path, capsys, accum):
    args = [str(accum), "40"]
    plain(tmp_path, CLOSURE_LOOP, args)
    truth = _truth(capsys.readouterr().out)
    code, doc, folder = watch_script(tmp_path, CLOSURE_LOOP, args)
    watched = _truth(capsys.readouterr().out)
    assert code == 0 and watched == truth  # the same losses and parameters, bit for bit
    assert len(truth["norms"]) == 40
    steps = load_run(folder).steps
    assert len(steps) == 40
    # this step's norm, every micro-batch in it (not the step before's, not 3 of 4)
    assert steps.column("grad_norm").tolist() == pytest.approx(truth["norms"], rel=1e-5)
    # the step's loss: the mean of its micro-batches' losses (what its backwards were given)
    assert steps.column("loss").tolist() == pytest.approx(truth["losses"], rel=1e-5)
    assert [e for e in doc["events"] if e["kind"] == "diagnosis"] == []


NONE_CLOSURE = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(6):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    print(torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item())
    opt.step(closure=None)  # accelerate's AcceleratedOptimizer.step passes it on
    opt.zero_grad()
"""


def test_step_with_closure_none_is_a_plain_step(tmp_path, capsys):
    plain(tmp_path, NONE_CLOSURE)
    expected = capsys.readouterr().out
    code, doc, folder = watch_script(tmp_path, NONE_CLOSURE)
    assert code == 0 and capsys.readouterr().out == expected
    norms = [float(v) for v in expected.split()]
    steps = load_run(folder).steps
    assert steps.column("grad_norm").tolist() == pytest.approx(norms, rel=1e-5)
    # no notice of any kind: not a closure, not a diagnosis
    assert [e for e in doc["events"] if e["kind"] in ("diagnosis", "info")] == []


CLIPPED = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x, y = torch.randn(32, 8), 4 * torch.randn(32, 1)
for step in range(6):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    # torch's own norm before it clips (what Lightning and Hugging Face log as grad_norm)
    CLIP
    opt.step()
"""
# accelerate (1.x) takes the norm apart and clips with it: no clip_grad_norm_ call
BY_PARTS = """params = list(model.parameters())
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    torch.nn.utils.clip_grads_with_norm_(params, 0.25, norm)
    print(norm.item())"""


@pytest.mark.parametrize("clip", [
    "print(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25).item())", BY_PARTS],
    ids=["clip_grad_norm_", "get_total_norm+clip_grads_with_norm_"])
def test_the_grad_norm_is_the_one_before_clip_grad_norm_clips(tmp_path, capsys, clip):
    source = CLIPPED.replace("CLIP", clip)
    plain(tmp_path, source)
    expected = capsys.readouterr().out
    code, doc, folder = watch_script(tmp_path, source)
    assert code == 0 and capsys.readouterr().out == expected
    before_clip = [float(v) for v in expected.split()]
    assert min(before_clip) > 0.25  # every step was clipped
    steps = load_run(folder).steps
    assert steps.column("grad_norm").tolist() == pytest.approx(before_clip, rel=1e-5)
    assert [e for e in doc["events"] if e["kind"] == "diagnosis"] == []


KEYWORD_INPUTS = HEAD + """
class LM(nn.Module):  # a Hugging Face model's signature: everything by keyword
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.head = nn.Linear(16, 64)
    def forward(self, input_ids=None, labels=None):
        logits = self.head(self.emb(input_ids))
        return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
model = LM()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
input_ids = torch.randint(0, 64, (32, 40))
labels = torch.randint(0, 64, (32, 40))
print(input_ids.nbytes + labels.nbytes)
for step in range(4):
    opt.zero_grad()
    loss = model(CALL)
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("call", ["input_ids=input_ids, labels=labels", "input_ids, labels"])
def test_keyword_inputs_count_in_other_as_positional_ones_do(tmp_path, capsys, call):
    source = KEYWORD_INPUTS.replace("CALL", call)
    code, _, folder = watch_script(tmp_path, source)
    assert code == 0
    input_bytes = int(capsys.readouterr().out.split()[0])  # plain torch's count: 20,480 B
    samples = load_run(folder).samples
    cols = samples.columns
    # after backward (a forward's row holds them as activations: embedding and cross_entropy
    # save them): the batch the model was called with, by keyword as positionally
    after = [r for r in samples.rows() if r[1] != SAMPLE_PHASE_CODE["forward"]]
    assert len(after) == 4 * 3 - 1  # backward, optimizer; zero_grad from step 1 on
    assert {r[cols.index("other")] for r in after} == {input_bytes}
    assert not math.isnan(load_run(folder).steps.column("loss")[0])


CHECKPOINTED = HEAD + """
from torch.utils.checkpoint import checkpoint
CKPT, TRUTH = sys.argv[1] == "1", sys.argv[2] == "1"
class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(4))
    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if CKPT else b(x)
        return x.sum()
model = Deep()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
params = {p.data_ptr() for p in model.parameters()}
for step in range(3):
    opt.zero_grad()
    if TRUTH:  # plain torch's count of what the forward saved, each storage once
        saved = {}
        def pack(t):
            if t.untyped_storage().data_ptr() not in params:
                saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(x)
        print(sum(saved.values()))
    else:
        loss = model(x)
    loss.backward()
    opt.step()
"""


def test_checkpoint_recompute_is_a_phase_and_its_saving_shows(tmp_path, capsys):
    forward_bytes = {}
    for ckpt in ("0", "1"):
        plain(tmp_path, CHECKPOINTED, [ckpt, "1"])
        truth = {int(v) for v in capsys.readouterr().out.split()}
        code, doc, folder = watch_script(tmp_path, CHECKPOINTED, [ckpt, "0"], out=f"c{ckpt}")
        assert code == 0
        run = load_run(folder)
        cols = run.samples.columns
        forward = [r for r in run.samples.rows() if r[1] == SAMPLE_PHASE_CODE["forward"]]
        assert len(forward) == 3  # one a step: the recompute in backward is no forward
        assert {r[cols.index("activations")] for r in forward} == truth
        forward_bytes[ckpt] = truth.pop()
        assert [m["name"] for m in doc["models"]] == ["model"]  # no block as a model
        recompute = doc["summary"]["extra"]["custom_phases_ms"].get("recompute", 0.0)
        assert (recompute > 0) == (ckpt == "1")
        assert diagnoses_of(doc) == []
    assert forward_bytes["1"] < forward_bytes["0"]  # what checkpointing saves is visible


def diagnoses_of(doc) -> list:
    return [e["key"] for e in doc["events"] if e["kind"] == "diagnosis"]


LBFGS_LOOP = HEAD + """
import json
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
x, y = torch.randn(32, 8), torch.randn(32, 1)
first = []  # each step's first evaluation: (its loss, its gradients' norm, in double)
for step in range(6):
    calls = []
    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if not calls:
            norm = sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()) ** 0.5
            first.append((loss.item(), norm))
        calls.append(1)
        return loss
    opt.step(closure)
    assert len(calls) > 1  # the line search evaluated the closure again
print(json.dumps(first))
"""


def test_lbfgs_steps_norm_is_its_first_evaluations_as_its_loss_is(tmp_path, capsys):
    """LBFGS evaluates its closure several times a step, the gradients changing each time:
    steps.csv's loss is the first evaluation's (what step(closure) returns) and so is its
    grad norm, counted by the script in double after that evaluation's backward."""
    plain(tmp_path, LBFGS_LOOP)
    truth = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    code, doc, folder = watch_script(tmp_path, LBFGS_LOOP)
    assert code == 0 and json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == truth
    steps = load_run(folder).steps
    assert steps.column("loss").tolist() == pytest.approx([t[0] for t in truth], rel=1e-5)
    assert steps.column("grad_norm").tolist() == pytest.approx([t[1] for t in truth], rel=1e-5)
    assert [e for e in doc["events"] if e["kind"] == "diagnosis"] == []
