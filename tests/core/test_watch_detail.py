"""A watch's detail on a schedule (core.watch.detail): every step records its phases, loss
and parameters, gradients and optimizer state; what is saved for backward and the grad norm
are measured on the detailed steps (the others carry the saved bytes, marked so, and leave
the norm empty); a change between detailed steps brings the detail at once; `every` is every
step."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from memlens.core import findings
from memlens.core.watch.detail import (
    AUTO_EVERY_BELOW,
    CALIBRATION_CYCLES,
    CYCLE,
    FIRST_DETAILED,
    MAX_CALIBRATION_CYCLES,
    MAX_EVERY,
    SCHEDULE_SHARE,
    WARM_UP_CYCLES,
    DetailPolicy,
    WatchDetail,
    parse_detail,
)
from memlens.core.watch.script import run_script

# the first step whose cycle counts (after the first detailed steps and the warm-up cycles)
CALIBRATION_START = FIRST_DETAILED + CYCLE * WARM_UP_CYCLES
CALIBRATED = CALIBRATION_START + CYCLE * CALIBRATION_CYCLES  # the fewest steps it takes

LOOP = """
import sys
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
kept, steps, leak_from = [], int(sys.argv[1]), int(sys.argv[2])
for step in range(steps):
    gen = torch.Generator().manual_seed(step)
    x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if step >= leak_from:
        kept.append(loss)  # the bug starts here: every later step's graph is kept
    print(f"{step} {loss.item():.6f}")
"""


def rows(folder, name):
    with open(folder / name, newline="") as fh:
        return list(csv.DictReader(fh))


def watched(tmp_path, capsys, args, detail):
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    code = run_script(str(script), args, out=tmp_path / "run", quiet=True, detail=detail)
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    return code, out, doc


def test_parse_detail_takes_every_auto_or_n_and_says_what_else_is_wrong():
    assert parse_detail("every") == "every" and parse_detail("AUTO") == "auto"
    assert parse_detail("7") == 7 and parse_detail(1) == "every"
    for bad in ("0", "-3", "sometimes", "2.5"):
        with pytest.raises(ValueError, match="every, auto or a whole number"):
            parse_detail(bad)


def test_auto_keeps_every_step_where_the_detail_is_cheap_else_a_schedule():
    """Calibration takes cycles of three steps: with the detail, the one after it, one
    clear of both; the share of the step it costs decides (fake step times: no clock)."""
    for off_ms, on_ms, every in ((10.0, 10.0 * (1 + AUTO_EVERY_BELOW / 2), 1),
                                 (2.0, 2.4, 20)):  # 20% of a step: every 20 steps
        policy = DetailPolicy("auto")
        wants = []
        for step in range(CALIBRATED):
            on = policy.want(step)
            wants.append(on)
            policy.note_step(step, on_ms if on else off_ms, on)
        assert wants[:FIRST_DETAILED] == [True] * FIRST_DETAILED
        assert wants[FIRST_DETAILED:] == [True, False, False] * (WARM_UP_CYCLES
                                                                 + CALIBRATION_CYCLES)
        assert policy.every == every, policy.why
    start = CALIBRATED
    later = [policy.want(s) for s in range(start, start + 40)]
    assert later.count(True) == 2 and later[19] and later[39]  # every 20th step
    policy.trigger("a toggle")
    assert policy.want(start + 40) and policy.triggered == {"a toggle": 1}


def test_auto_counts_what_the_step_after_the_detail_pays():
    """The step after a detailed one is slower too (mlp: +25 us against a step clear of
    both): part of the detail's cost. Here the detailed step costs 0.1 ms more and the one
    after it 0.3 ms more than a clear one, on a 2 ms step: 20%, every 20 steps. Steps
    alternating without and with the detail read -0.2 ms (held at zero: every step, 20% of
    every step of the run)."""
    def times(step, on):
        if on:
            return 2.1
        return 2.3 if (step - FIRST_DETAILED) % CYCLE == 1 else 2.0

    policy = DetailPolicy("auto")
    _calibrate(policy, times, CALIBRATED)
    assert policy.every == 20, policy.why
    assert f"over {CALIBRATION_CYCLES} cycles" in policy.why


def _calibrate(policy: DetailPolicy, times, steps: int) -> list[bool]:
    """Drive `policy` over `steps` steps, each taking times(step, on) ms; its decisions."""
    wants = []
    for step in range(steps):
        on = policy.want(step)
        wants.append(on)
        policy.note_step(step, times(step, on), on)
    return wants


@pytest.mark.parametrize("cost", [0.03, 0.01])
def test_auto_measures_more_cycles_while_the_cost_is_too_close_to_call(cost):
    """A cost near AUTO_EVERY_BELOW on a noisy machine (steps +-15%, a cycle sharing its
    moment's speed): CALIBRATION_CYCLES cycles cannot tell, so calibration goes on, up to
    MAX_CALIBRATION_CYCLES, and then the cycles decide (where they still cannot tell, a
    schedule sized by their interval's top): what the numbers say, computed here with
    numpy."""
    import numpy as np

    rng = np.random.default_rng(7)
    speed = 2.0 * (1 + 0.15 * rng.standard_normal(200))  # the machine's, cycle by cycle
    jitter = 0.08 * rng.standard_normal(400)  # a step's own (4% of it)

    def times(step, on):
        cycle_speed = speed[max(0, step - FIRST_DETAILED) // CYCLE]
        return float(cycle_speed * (1 + (cost if on else 0.0)) + jitter[step])

    policy = DetailPolicy("auto")
    _calibrate(policy, times, CALIBRATED)
    assert policy.every is None and policy.chosen == "measuring"  # too close to call
    # (what run.json says of a run that ends here)
    assert f"{CALIBRATION_CYCLES} cycles of three steps so far" in policy.describe()["why"]
    step = CALIBRATED
    while policy.every is None and step < CALIBRATION_START + CYCLE * MAX_CALIBRATION_CYCLES:
        on = (step - FIRST_DETAILED) % CYCLE == 0  # with, after, clear, with...
        assert policy.want(step) == on
        policy.note_step(step, times(step, on), on)
        step += 1
    n = (step - CALIBRATION_START) // CYCLE  # the cycles it counted
    assert policy.every is not None and CALIBRATION_CYCLES < n <= MAX_CALIBRATION_CYCLES
    starts = range(CALIBRATION_START, CALIBRATION_START + CYCLE * n, CYCLE)
    clear = [times(s + 2, False) for s in starts]
    cost_ms = [times(s, True) + times(s + 1, False) - 2 * times(s + 2, False) for s in starts]
    diffs = np.sort(cost_ms)
    base, mid = float(np.median(clear)), max(0.0, float(np.median(diffs)))
    # the median's distribution-free ~95% interval: the k-th cost from either end
    k = max(0, math.floor((n - 2 * math.sqrt(n)) / 2))
    low, high = float(diffs[k]) / base, max(0.0, float(diffs[n - 1 - k])) / base
    if low < AUTO_EVERY_BELOW <= high:  # still too close to call: sized by the top
        expected = max(2, min(MAX_EVERY, math.ceil(high / SCHEDULE_SHARE)))
    elif mid / base < AUTO_EVERY_BELOW:
        expected = 1
    else:
        expected = max(2, min(MAX_EVERY, math.ceil(mid / base / SCHEDULE_SHARE)))
    assert policy.every == expected, policy.why
    assert f"over {n} cycles" in policy.why


def test_auto_decides_at_once_where_the_cost_is_clear_of_the_noise():
    """A detail costing 20% of a step, steps +-15% noisy: the interval is far above
    AUTO_EVERY_BELOW after CALIBRATION_CYCLES cycles, so the schedule is chosen then; a
    step the detail came to early (a change) cuts its cycle short: calibration counts one
    cycle more."""
    import numpy as np

    rng = np.random.default_rng(3)
    speed = 2.0 * (1 + 0.15 * rng.standard_normal(100))

    def times(step, on):
        return float(speed[max(0, step - FIRST_DETAILED) // CYCLE] * (1.2 if on else 1.0))

    policy = DetailPolicy("auto")
    wants = []
    for step in range(CALIBRATED + 2 * CYCLE):
        on = policy.want(step) or step == CALIBRATION_START + 2  # a new input shape, say
        wants.append(on)
        policy.note_step(step, times(step, on), on)
        if policy.every is not None:
            break
    assert len(wants) == CALIBRATED + CYCLE  # one cycle lost
    assert policy.every > 1 and f"over {CALIBRATION_CYCLES} cycles" in policy.why


def test_auto_is_not_fooled_by_a_watchs_first_slow_steps():
    """A watch's first steps run its code for the first time: slow by milliseconds, at
    random (a 3 ms mlp step took 4-8 ms up to about its 12th). Here the warm-up's steps
    without the detail are the slow ones, so their cycles say the detail is free; after
    them, the detail costs 6.25% of a 2 ms step. Auto chooses the schedule that cost asks
    for (ceil(6.25% / SCHEDULE_SHARE)), never every step (it chose every step from pairs
    like these: the median of six differences was negative)."""
    off_ms, on_ms = 2.0, 2.125

    def times(step, on):
        if step < CALIBRATION_START:  # the warm-up measured
            return 3.0 if on else 4.0
        return on_ms if on else off_ms

    policy = DetailPolicy("auto")
    _calibrate(policy, times, CALIBRATED)
    assert policy.every == math.ceil((on_ms - off_ms) / off_ms / SCHEDULE_SHARE), policy.why
    assert f"over {CALIBRATION_CYCLES} cycles" in policy.why


def test_a_cost_still_too_close_to_call_after_every_cycle_gets_a_schedule_not_every_step():
    """A detail costing 1% of a 2 ms step on a machine whose neighbouring cycles differ by
    +-0.3 ms: after MAX_CALIBRATION_CYCLES cycles the interval still straddles
    AUTO_EVERY_BELOW. Every step would risk its top for the whole run; the schedule is
    chosen, sized by that top (on the old rule the median, 1%, chose every step; and
    where half the differences were alike, a MAD's interval was zero wide)."""
    def times(step, on):
        cycle = (step - FIRST_DETAILED) // CYCLE
        return 2.0 + ((0.02 + (0.3 if cycle % 2 else -0.3)) if on else 0.0)

    policy = DetailPolicy("auto")
    _calibrate(policy, times, CALIBRATION_START + CYCLE * MAX_CALIBRATION_CYCLES)
    assert policy.every is not None and policy.every > 1, policy.why
    assert "too close to" in policy.why and f"over {MAX_CALIBRATION_CYCLES} cycles" in policy.why


def test_a_run_that_ends_while_auto_measures_says_how_far_it_got(tmp_path, capsys):
    """A script shorter than auto's calibration: after the first steps, one step in three
    takes the detail (memory.csv's carried rows show which the others are), and run.json
    says it was still measuring and over how many cycles, not "0 cycles" from its start."""
    cycles = CALIBRATION_CYCLES - 2
    steps = CALIBRATION_START + CYCLE * cycles + 2  # ends in a cycle cut short
    code, _, doc = watched(tmp_path, capsys, [str(steps), "1000"], detail="auto")
    carried = {int(r["step"]) for r in rows(tmp_path / "run", "memory.csv")
               if r["carried"] == "1"}
    detailed = set(range(FIRST_DETAILED, steps, CYCLE))
    assert code == 0 and carried == set(range(FIRST_DETAILED, steps)) - detailed
    assert doc["detail"]["chosen"] == "measuring"
    # the cycles after the warm-up's; the last one unfinished
    assert f"{cycles} cycles of three steps so far" in doc["detail"]["why"]


def test_every_nth_step_measures_what_is_saved_and_the_others_carry_it(tmp_path, capsys):
    """detail=4: steps 0-2, then every 4th, measure every phase; the others have two rows,
    after zero_grad and at their end, marked carried, whose parameters, gradients and
    optimizer state are exact (plain torch's counts); the script's output is unchanged."""
    code, out, _ = watched(tmp_path, capsys, ["16", "1000"], detail=4)
    script = tmp_path / "plain.py"
    script.write_text(LOOP)
    import subprocess
    import sys

    plain = subprocess.run([sys.executable, str(script), "16", "1000"], capture_output=True,
                           text=True, check=True).stdout
    assert code == 0 and out == plain
    mem = rows(tmp_path / "run", "memory.csv")
    by_step: dict[int, list[dict]] = {}
    for r in mem:
        by_step.setdefault(int(r["step"]), []).append(r)
    detailed = {s for s, rs in by_step.items() if all(r["carried"] == "0" for r in rs)}
    assert detailed == {0, 1, 2, 6, 10, 14}  # the first 3, then every 4th
    for s in set(by_step) - detailed:  # zero_grad's sample (cleared: none) and the end's
        zero, end = by_step[s]
        assert [(r["phase"], r["carried"]) for r in (zero, end)] == [
            ("zero_grad", "1"), ("optimizer", "1")]
        assert int(zero["grads_bytes"]) == 0
    torch.manual_seed(0)  # the model and Adam as the script makes them: the true bytes
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(8, 16)).sum().backward()
    opt.step()  # Adam's state, made at its first step: two moments and a step count a tensor
    state = sum(t.untyped_storage().nbytes() for st in opt.state.values()
                for t in st.values() if isinstance(t, torch.Tensor))
    for rs in by_step.values():
        last = rs[-1]
        assert last["phase"] == "optimizer"
        assert (int(last["params_bytes"]), int(last["grads_bytes"]),
                int(last["optimizer_bytes"])) == (params, params, state)
    steps = rows(tmp_path / "run", "steps.csv")
    assert len(steps) == 16
    for r, line in zip(steps, plain.splitlines(), strict=True):  # steps.csv: 6 digits
        assert float(r["loss"]) == pytest.approx(float(line.split()[1]), rel=1e-5)


def _norms_by_hand(steps: int, clear_until: int | None = None) -> list[float]:
    """LOOP's gradients' 2-norm at each optimizer step, on plain torch, counted in double."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    norms = []
    for step in range(steps):
        gen = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        norms.append(math.sqrt(sum(float((p.grad.double() ** 2).sum())
                                   for p in model.parameters())))
        opt.step()
    return norms


def test_the_grad_norm_is_taken_on_the_detailed_steps_and_left_empty_on_the_others(
        tmp_path, capsys):
    """detail=4: steps.csv's grad_norm on the detailed steps (0-2, then every 4th) equals the
    norm counted by hand on plain torch, also on those after steps without it (the native
    hooks were off in between); the others' is empty, not a carried figure."""
    code, _, _ = watched(tmp_path, capsys, ["16", "1000"], detail=4)
    assert code == 0
    by_hand = _norms_by_hand(16)
    steps = rows(tmp_path / "run", "steps.csv")
    taken = {int(r["step"]) for r in steps if r["grad_norm"] != ""}
    assert taken == {0, 1, 2, 6, 10, 14}
    for r in steps:
        if r["grad_norm"] != "":
            assert float(r["grad_norm"]) == pytest.approx(by_hand[int(r["step"])], rel=1e-5)
    (tmp_path / "every").mkdir()
    code, _, _ = watched(tmp_path / "every", capsys, ["16", "1000"], detail="every")
    assert code == 0
    steps = rows(tmp_path / "every" / "run", "steps.csv")
    assert [float(r["grad_norm"]) for r in steps] == pytest.approx(by_hand, rel=1e-5)


NOT_CLEARED_FROM = """
import sys
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
for step in range(60):
    if step < int(sys.argv[1]):
        opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()  # STEP
"""


@pytest.mark.parametrize("detail", [5, "auto"])
def test_gradients_no_longer_cleared_from_a_step_without_detail_are_found_within_a_step(
        tmp_path, detail):
    """zero_grad stops at step 40 of 60, between detailed steps: diagnosis 3 is found at the
    optimizer's line as under every-step detail, at most one step later (the cleared step
    before, without the detail, has no norm to count from)."""
    found = {}
    for mode in ("every", detail):
        script = tmp_path / f"train_{mode}.py"
        script.write_text(NOT_CLEARED_FROM)
        folder = tmp_path / f"run_{mode}"
        assert run_script(str(script), ["40"], out=folder, quiet=True, detail=mode) == 0
        doc = json.loads((folder / "run.json").read_text())
        found[mode] = [e for e in doc["events"] if e["key"] == findings.GRADS_NOT_CLEARED]
    assert len(found["every"]) == 1 and len(found[detail]) == 1
    line = NOT_CLEARED_FROM.strip().splitlines().index(
        "    opt.step()  # STEP") + 1 + 1  # (the script starts with a blank line)
    assert found["every"][0]["where"].endswith(f"train_every.py:{line}")
    assert found[detail][0]["where"].endswith(f"train_{detail}.py:{line}")
    assert 40 <= found["every"][0]["step"] <= found[detail][0]["step"] <= (
        found["every"][0]["step"] + 1)


def test_a_leak_that_starts_between_detailed_steps_is_found_within_a_few_steps(
        tmp_path, capsys):
    """The default schedule on a step of a fraction of a millisecond (every Nth step), and
    a loss kept from step 40 of 60: found as under every-step detail, at the same line,
    by step 43."""
    code, _, doc = watched(tmp_path, capsys, ["60", "40"], detail="auto")
    assert code == 0
    found = [e for e in doc["events"] if e["key"] == findings.GRAPH_KEPT]
    assert found and found[0]["step"] <= 43
    assert found[0]["where"].endswith("train.py:16")  # `kept.append(loss)`
    assert doc["detail"]["mode"] == "auto" and doc["summary"]["extra"]["detail"]["chosen"]


def test_a_script_whose_own_saved_tensor_hooks_are_over_memlenss_keeps_every_step(
        tmp_path, capsys):
    """`torch.autograd.graph.save_on_cpu()` around the loop: memlens's hooks are under the
    script's and are never popped; the detail stays on, said in run.json."""
    script = tmp_path / "train.py"
    lines = LOOP.strip().splitlines()
    imports = [ln for ln in lines if ln.startswith("import ")]
    body = [ln for ln in lines if not ln.startswith("import ")]
    script.write_text("\n".join(imports) + "\nwith torch.autograd.graph.save_on_cpu():\n"
                      + "".join("    " + ln + "\n" for ln in body))
    code = run_script(str(script), ["20", "1000"], out=tmp_path / "run", quiet=True,
                      detail=4)
    capsys.readouterr()
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert code == 0 and "saved-tensor hooks are over memlens's" in doc["summary"]["extra"][
        "detail"]["why"]
    assert {r["carried"] for r in rows(tmp_path / "run", "memory.csv")} == {"0"}


KEEPS = """
import sys
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
kept, steps, leak_from, second_site = [], int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"

def forward(x):
    return model(x)

for step in range(steps):
    gen = torch.Generator().manual_seed(step)
    x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(forward(x), y)
    loss.backward()
    opt.step()
    if step >= leak_from:  # a forward under grad never backwarded, its graph kept
        kept.append(model(x) if second_site else forward(x))
    print(f"{step} {loss.item():.6f}")
"""


def saved_by_one_forward() -> int:
    """What one forward of the script's model on an (8, 16) batch saves for backward, by
    plain torch's saved_tensors_hooks: each storage once, parameters left out."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randn(8, 16))
    return sum(seen.values())


@pytest.mark.parametrize("second_site", [True, False])
def test_graphs_a_step_without_detail_keeps_are_never_left_out_of_a_measured_figure(
        tmp_path, capsys, second_site):
    """From step 12 of 30 a forward's graph is kept after each update (never backwarded),
    the detail every 4th step. From a call site not backwarded the detail comes for that
    call (what it saves is counted); from the training call's own site the graph is made
    without the detail: its saved tensors are in no figure, so every sample while it lives
    is marked carried. Every forward row not marked equals plain torch's count: the kept
    graphs' and its own."""
    script = tmp_path / "train.py"
    script.write_text(KEEPS)
    leak_from = 12
    code = run_script(str(script), ["30", str(leak_from), "1" if second_site else "0"],
                      out=tmp_path / "run", quiet=True, detail=4)
    capsys.readouterr()
    assert code == 0
    one = saved_by_one_forward()
    measured: dict[int, list[int]] = {}
    for r in rows(tmp_path / "run", "memory.csv"):
        if r["phase"] == "forward" and r["carried"] == "0":
            measured.setdefault(int(r["step"]), []).append(int(r["activations_bytes"]))
    # Step s (a step ends at the update) first makes the forward kept after update s-1,
    # alive with those kept before it, then its own forward: each graph its own batch's.
    want = {s: [one] for s in range(leak_from + 1)}
    want.update({s: [(s - leak_from) * one, (s - leak_from + 1) * one]
                 for s in range(leak_from + 1, 30)})
    want[30] = [(30 - leak_from) * one]
    assert measured and {s: want[s] for s in measured} == measured
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    later = [s for s in measured if s > leak_from + 1]
    if second_site:  # the kept forwards' steps measured
        assert later
    else:  # what a step without detail kept is alive to the end: nothing measured after it
        assert not later
    found = {e["key"] for e in doc["events"]}
    assert findings.GRAD_NOT_BACKWARDED in found or findings.GRAPH_KEPT in found


class _Book:
    """What WatchDetail asks of a watch's CallBook."""

    def __init__(self) -> None:
        self.track, self.unbackwarded_sites, self.left = object(), set(), False

    def carried_graphs_alive(self) -> bool:
        return self.left


class _Steps:
    detailed, incomplete = True, False


def _scheduled(book) -> WatchDetail:
    """A WatchDetail whose auto policy has chosen a schedule (fake step times)."""
    policy = DetailPolicy("auto")
    detail = WatchDetail(policy, torch.autograd.graph.saved_tensors_hooks(
        lambda t: t, lambda t: t), _Steps(), book)
    for step in range(CALIBRATED):
        on = policy.want(step)
        policy.note_step(step, 2.4 if on else 2.0, on)
    assert policy.every > 1
    return detail


@pytest.mark.parametrize("retained, left, why", [
    (4096, False, "saved tensors outlived their step"),
    (0, True, "a step without the detail left its graph alive")])
def test_auto_takes_the_detail_every_step_once_a_loop_keeps_what_it_saved(retained, left, why):
    """Saved tensors alive past their step (a detailed step's, or a graph a step without
    detail made, alive unreleased) would be left out of a later figure by a step without
    detail: auto takes it every step from then on, and says why; while such a graph lives
    the samples are marked carried."""
    book = _Book()
    detail = _scheduled(book)
    detail.end_step(10, 0)
    assert detail.policy.every > 1 and not detail._steps.incomplete
    book.left = left
    detail.end_step(10, retained)
    assert detail.policy.every == 1 and detail.policy.describe()["why"].startswith(why)
    assert all(detail.policy.want(s) for s in range(22, 40))
    assert detail._steps.incomplete == left


def test_a_site_whose_forwards_were_not_backwarded_takes_the_detail():
    book = _Book()
    detail = _scheduled(book)
    detail._sites.add("eval.py:3")
    detail._shapes.add(("Net", (8, 16)))
    x = torch.randn(8, 16)
    try:
        assert not detail.at_call("eval.py:3", "Net", (x,))
        book.unbackwarded_sites.add("eval.py:3")
        assert detail.at_call("eval.py:3", "Net", (x,))
        assert detail.policy.triggered == {"a site whose forwards were not backwarded": 1}
    finally:
        detail.stop()  # the saved-tensor hooks it pushed


ENDS = """
import torch

def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(14):
        gen = torch.Generator().manual_seed(step)
        model(torch.randn(4, 16, generator=gen)).square().mean().backward()
        opt.step()
        opt.zero_grad()  # Hugging Face's order: the cleared gradients end the loop
    with torch.no_grad():
        model(torch.randn(4, 16))
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    state = sum(t.untyped_storage().nbytes() for st in opt.state.values()
                for t in st.values() if isinstance(t, torch.Tensor))
    print(grads, state)

main()
"""


def test_a_run_that_ends_in_a_step_without_detail_ends_with_its_figures(tmp_path, capsys):
    """The loop's last update, then zero_grad and an evaluation, inside a function whose
    objects are gone when the script ends: memory.csv's last row (a step without detail)
    holds what the script itself counts at its end, cleared gradients and Adam's state."""
    script = tmp_path / "train.py"
    script.write_text(ENDS)
    code = run_script(str(script), [], out=tmp_path / "run", quiet=True, detail=50)
    grads, state = map(int, capsys.readouterr().out.split())
    assert code == 0 and grads == 0 and state > 0
    last = rows(tmp_path / "run", "memory.csv")[-1]
    assert (last["step"], last["phase"], last["carried"]) == ("14", "eval", "1")
    assert (int(last["grads_bytes"]), int(last["optimizer_bytes"])) == (grads, state)


def test_a_detailed_steps_start_is_timed_as_the_detailed_steps_own(tmp_path, monkeypatch):
    """Turning the detail on happens as a step begins, inside the bookkeeping of the step
    before: calibration must charge it to the detailed step, not to the clear step before
    it (which made the detail look cheaper by twice its start). Here turning it on takes a
    second of the watch's clock: every detailed step's time has it, no other step's."""
    import memlens

    timed = []
    note_step = DetailPolicy.note_step

    def record(self, step, step_ms, detailed):
        timed.append((step, step_ms, detailed))
        note_step(self, step, step_ms, detailed)

    monkeypatch.setattr(DetailPolicy, "note_step", record)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    with memlens.watch(out=tmp_path / "run", quiet=True, detail="auto") as w:
        steps, late = w._session.steps, [0.0]
        clock = steps.clock
        steps.clock = lambda: clock() + late[0]
        turn_on = WatchDetail._set

        def slow_on(self, on):
            if on and not self.on:
                late[0] += 1.0  # a second, on the watch's clock
            turn_on(self, on)

        monkeypatch.setattr(WatchDetail, "_set", slow_on)
        for _ in range(CALIBRATION_START + 2 * CYCLE):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    calibration = [(ms, detailed) for step, ms, detailed in timed if step > FIRST_DETAILED]
    assert calibration and any(d for _, d in calibration) and not all(d for _, d in calibration)
    for ms, detailed in calibration:
        assert (ms >= 1000.0) == detailed, calibration
