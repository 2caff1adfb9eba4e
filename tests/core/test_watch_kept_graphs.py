"""Graphs a loop keeps where the tensor passed to backward does not show them (#48): a loss
kept while `loss / n` is backwarded, activations cached on a module, validation outputs in
a dict or in a list emptied each epoch. Each bug beside its clean twin; bytes counted with
plain torch here."""

from __future__ import annotations

import pytest
import torch

from memlens.core import findings
from tests.core.test_watch import HEAD, diagnoses, watch_script


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def keys(doc: dict) -> list[str]:
    return sorted(d["key"] for d in diagnoses(doc))


# --- a leak behind a scaled backward ------------------------------------------------------

SCALED = HEAD + """
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 8), torch.randn(64, 1)
losses = []
for step in range(6):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    losses.append({kept})  # KEEP
    ({backwarded}).backward()
    opt.step()
print(sum(float(v) for v in losses))
"""


@pytest.mark.parametrize("backwarded", ["loss / 1", "loss * 0.5", "loss.float() / 4"])
def test_a_loss_kept_while_a_scaled_one_is_backwarded_is_a_graph_kept(tmp_path, backwarded):
    source = SCALED.format(kept="loss", backwarded=backwarded)
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0
    found = diagnoses(doc, findings.GRAPH_KEPT)
    assert len(found) == 1 and keys(doc) == [findings.GRAPH_KEPT]
    assert "global `losses`" in found[0]["message"]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# KEEP')}")


@pytest.mark.parametrize("kept", ["loss.item()", "loss.detach()"])
def test_clean_a_scaled_backward_with_its_loss_kept_as_a_value(tmp_path, kept):
    code, doc, _ = watch_script(tmp_path, SCALED.format(kept=kept, backwarded="loss / 1"))
    assert code == 0 and diagnoses(doc) == []


OUTPUTS_KEPT = HEAD + """
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 8), torch.randint(0, 4, (64,))
class Keeper:
    def __init__(self):
        self.kept = []
    def compute_loss(self, inputs, labels):
        outputs = {{"logits": model(inputs)}}
        self.kept.append({kept})  # KEEP
        return nn.functional.cross_entropy(outputs["logits"], labels)
keeper = Keeper()
for step in range(6):
    opt.zero_grad()
    (keeper.compute_loss(x, y) / 2).backward()
    opt.step()
"""


def test_outputs_kept_by_an_object_of_the_script_name_its_attribute(tmp_path):
    """The shape of a Hugging Face Trainer subclass keeping `outputs` in compute_loss: the
    holder is an attribute of an object the script made, not a variable."""
    source = OUTPUTS_KEPT.format(kept="outputs")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0
    found = diagnoses(doc, findings.GRAPH_KEPT)
    assert len(found) == 1 and "`keeper.kept`" in found[0]["message"]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# KEEP')}")


def test_clean_outputs_kept_detached(tmp_path):
    source = OUTPUTS_KEPT.format(kept='{"logits": outputs["logits"].detach()}')
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and diagnoses(doc) == []


# --- activations cached on a module -------------------------------------------------------

CACHE = HEAD + """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 256)
        self.cache = []
    def forward(self, x):
        h = torch.relu(self.fc(x))
        {store}  # STORE
        return h
model = nn.Sequential(Block(), nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(256, 64), torch.randn(256, 1)
for step in range(6):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""
H_BYTES = 256 * 256 * 4  # one cached h: 256 rows of 256 floats (each its own storage)


def test_activations_appended_to_a_module_list_are_found_with_their_growth(tmp_path):
    source = CACHE.format(store="self.cache.append(h)")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and keys(doc) == [findings.MODULE_CACHE]
    d = diagnoses(doc)[0]
    assert "`self.cache` of `model.0` (Block)" in d["message"]
    assert d["where"].endswith(f"train.py:{line_of(source, '# STORE')}")
    # seen at steps 1 and 2's starts: the h of steps 0 and 1, one more each step
    n = int(d["message"].split(" keeps ")[1].split()[0])
    assert n == 2 and d["bytes"] == n * H_BYTES
    assert "+256 KiB a step" in d["message"]  # one h more each step
    assert "detach()" in d["fix"]


def test_an_activation_assigned_to_a_module_is_found_not_growing(tmp_path):
    code, doc, _ = watch_script(tmp_path, CACHE.format(store="self.cache = h"))
    assert code == 0 and keys(doc) == [findings.MODULE_CACHE]
    d = diagnoses(doc)[0]
    assert d["bytes"] == H_BYTES and "not growing" in d["message"]


@pytest.mark.parametrize("store", ["self.cache.append(h.detach())", "self.cache = h.detach()",
                                   "self._cache = h", "self.cache = h.mean()"])
def test_clean_module_caches(tmp_path, store):
    """Detached, a library's private attribute, a single value (a loss: diagnosis 2's)."""
    code, doc, _ = watch_script(tmp_path, CACHE.format(store=store))
    assert code == 0 and diagnoses(doc) == []


def test_clean_weight_norm_recomputes_its_weight_at_each_forward(tmp_path):
    """torch.nn.utils.weight_norm sets `weight` with a graph in a forward pre-hook."""
    source = HEAD + """
import warnings
warnings.simplefilter("ignore")
model = nn.Sequential(torch.nn.utils.weight_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(6):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and diagnoses(doc) == []


# --- kept validation outputs: a dict, a list emptied each epoch ---------------------------

VALIDATION = HEAD + """
model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 8), torch.randn(64, 8)
val = [torch.randn(128, 8) for _ in range(4)]
preds = {{}}
for epoch in range(3):
    outs = []
    for step in range(3):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        {ctx}
            {keep}  # KEEP
"""


def _saved_by_calls(inputs: list[torch.Tensor]) -> int:
    """What the model's forwards on `inputs` save for backward, each storage once, weights
    out: counted with torch's own saved_tensors_hooks on the same shapes."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        kept = [model(v) for v in inputs]
    del kept
    return sum(seen.values())


def test_outputs_kept_in_a_dict_name_it_with_every_kept_calls_bytes(tmp_path):
    source = VALIDATION.format(ctx="if True:",
                               keep="for k, v in enumerate(val): preds[k] = model(v)")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and keys(doc) == [findings.GRAD_NOT_BACKWARDED]
    d = diagnoses(doc)[0]
    assert "global `preds` (a dict)" in d["message"] and "4 calls" in d["message"]
    # all four kept calls' graphs, not one call's
    assert d["bytes"] == _saved_by_calls([torch.randn(128, 8) for _ in range(4)])
    assert "not growing" in d["message"]


def test_outputs_kept_in_a_list_emptied_each_epoch_name_it_and_its_growth(tmp_path):
    source = VALIDATION.format(ctx="if True:", keep="outs.append(model(val[step]))")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and keys(doc) == [findings.GRAD_NOT_BACKWARDED]
    d = diagnoses(doc)[0]
    assert "global `outs`" in d["message"]
    assert d["where"].endswith(f"train.py:{line_of(source, '# KEEP')}")
    calls = int(d["message"].split("held the graphs of ")[1].split()[0])
    one = _saved_by_calls([torch.randn(128, 8)])
    assert calls == 2 and d["bytes"] == 2 * one  # two steps' outputs before it is emptied
    assert f"+{one / 1024:.1f} KiB a step" in d["message"]


@pytest.mark.parametrize("keep", ["for k, v in enumerate(val): preds[k] = model(v)",
                                  "outs.append(model(val[step]))"])
def test_clean_kept_outputs_under_no_grad(tmp_path, keep):
    code, doc, _ = watch_script(tmp_path, VALIDATION.format(ctx="with torch.no_grad():",
                                                            keep=keep))
    assert code == 0 and diagnoses(doc) == []


# --- what a scan must tell apart (an independent user's scripts, 2026-12-07) ---------------

SCAN = HEAD + """
import collections
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 32)
        {init}
    def forward(self, x):
        h = torch.relu(self.fc(x))
        {store}  # STORE
        return h
{model}
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(6):
    x = torch.randn({rows}, 8)
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
"""


def _scan_script(tmp_path, init="pass", store="pass", rows="16",
                 model="model = nn.Sequential(Block(), nn.Linear(32, 1))"):
    source = SCAN.format(init=init, store=store, rows=rows, model=model)
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0
    return diagnoses(doc), source


def test_a_ring_buffer_of_activations_is_found(tmp_path):
    """collections.deque(maxlen=k): a cache that stops growing at k, found all the same."""
    found, source = _scan_script(tmp_path, "self.recent = collections.deque(maxlen=8)",
                                 "self.recent.append(h)")
    assert [d["key"] for d in found] == [findings.MODULE_CACHE]
    assert "`self.recent` of `model.0` (Block)" in found[0]["message"]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# STORE')}")


def test_one_activation_replaced_at_each_size_is_not_growing(tmp_path):
    """Each step's batch is larger: the one tensor held is larger, never more of them."""
    found, _ = _scan_script(tmp_path, store="self.last = h", rows="16 * (step + 1)")
    assert [d["key"] for d in found] == [findings.MODULE_CACHE]
    assert "not growing (replaced each step)" in found[0]["message"]


def test_a_view_of_a_parameter_kept_on_a_module_is_no_cache(tmp_path):
    """Tied weights: `self.w_t = other.weight.t()` once, a graph of one node, the parameter's
    own storage. Detaching it (the cache's fix) would stop the embedding from training."""
    model = """
class Head(nn.Module):
    def __init__(self, fc):
        super().__init__()
        self.w_t = fc.weight.t()
    def forward(self, h):
        return h @ self.w_t.t()
block = Block()
model = nn.Sequential(block, nn.ReLU(), Head(block.fc))"""
    found, _ = _scan_script(tmp_path, model=model, rows="16")
    assert found == []


def test_a_module_hidden_from_named_modules_is_named_by_its_path(tmp_path):
    model = """
class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), Block())
    def named_modules(self, *args, **kwargs):
        for name, m in super().named_modules(*args, **kwargs):
            if not isinstance(m, Block):
                yield name, m
    def forward(self, x):
        return self.body(x)
model = Wrapper()"""
    found, _ = _scan_script(tmp_path, store="self.kept = h", model=model)
    assert [d["key"] for d in found] == [findings.MODULE_CACHE]
    assert "`self.kept` of `model.body.1` (Block)" in found[0]["message"]


def test_a_parametrized_weight_built_outside_a_forward_is_no_model_call(tmp_path):
    """spectral_norm's parametrization computes the weight at construction, a root call of
    its ParametrizationList under grad: no forward of a model, never backwarded or not."""
    source = HEAD + """
from torch.nn.utils import parametrizations as P
model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), P.spectral_norm(nn.Linear(20, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 10), torch.randn(16, 1)
print(float(model[2].weight.sum()))
for step in range(6):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0 and diagnoses(doc) == []
    assert [m["class"] for m in doc["models"]] == ["Sequential"]


@pytest.mark.parametrize(("init", "store"), [
    ("self.by_layer = collections.defaultdict(list)", 'self.by_layer["h"].append(h)'),
    ("self.recent = collections.deque()", "self.recent.appendleft(h)"),
])
def test_a_cache_grown_through_an_item_or_at_the_left_names_the_line_that_grows_it(
        tmp_path, init, store):
    found, source = _scan_script(tmp_path, init, store)
    assert [d["key"] for d in found] == [findings.MODULE_CACHE]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# STORE')}")
