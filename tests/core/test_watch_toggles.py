"""Toggling the article's techniques on a watched script (`main.py watch --at`,
core/watch/interventions.py), on scripts written as users write them
(tests/core/toggle_scripts/): each toggle moves the right category by the bytes plain torch
counts for the script edited by hand the same way (plain_count.py, no memlens), the losses
before it are the plain run's, and what should not change results does not.

The runs are subprocesses, made once and shared, a few at a time."""

from __future__ import annotations

import csv
import itertools
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "toggle_scripts"
PARAM = 4  # bytes of a float32 parameter

# name -> (script, --at changes or None for a plain run counted by plain_count.py, env)
RUNS = {
    "loop": ("plain_loop.py", ["3:no_grad_eval=true", "3:zero_grad=set_to_none"], {}),
    "loop plain": ("plain_loop.py", None, {}),
    "loop no_grad": ("plain_loop.py", None, {"NO_GRAD_FROM": "3"}),
    "loop eval": ("plain_loop.py", ["3:eval_mode=true", "5:zero_grad=off"], {}),
    "loop eval edited": ("plain_loop.py", None, {"EVAL_FROM": "3", "FORGET_FROM": "5"}),
    "function": ("function_loop.py", ["3:amp=bf16", "5:amp=fp16"], {}),
    "function edited": ("function_loop.py", None, {"AMP_AT": "3:bf16,5:fp16"}),
    "class": ("class_trainer.py", ["3:zero_grad=set_to_none", "5:no_grad_eval=true"], {}),
    "class plain": ("class_trainer.py", None, {}),
    "rnn": ("rnn_carry.py", ["4:detach_state=true"], {}),
    "rnn edited": ("rnn_carry.py", None, {"DETACH_FROM": "4"}),
    # The sample after an iteration's optimizer steps is the next watch step's work
    # (docs/watch.md): a toggle at watch step 3 acts from iteration 2's sample on.
    "gan": ("gan.py", ["3:no_grad_eval=true", "5:eval_mode=true"], {}),
    "gan edited": ("gan.py", None, {"NO_GRAD_FROM": "2", "EVAL_FROM": "4"}),
    "refit": ("refit_validation.py", ["2:no_grad_eval=true"], {}),
    "input grad": ("input_gradient.py", ["2:no_grad_eval=true"], {}),
    "input grad plain": ("input_gradient.py", None, {}),
}


class Run:
    def __init__(self, done: subprocess.CompletedProcess, folder: Path | None) -> None:
        self.code, self.out, self.err, self.folder = done.returncode, done.stdout, done.stderr, \
            folder
        lines = self.out.splitlines()
        self.lines = [ln for ln in lines if ln.startswith(("step ", "val "))]
        self.act = [int(ln.split("=")[1]) for ln in lines if ln.startswith("ACT ")]
        self.grads = [int(ln.split("=")[1]) for ln in lines if ln.startswith("GRADS ")]

    @property
    def doc(self) -> dict:
        return json.loads((self.folder / "run.json").read_text())

    def memory(self) -> list[dict]:
        with (self.folder / "memory.csv").open(newline="") as fh:
            return list(csv.DictReader(fh))

    def forwards(self, column: str = "activations_bytes") -> list[int]:
        """A column at the end of each root model call (forward or eval), in order."""
        return [int(r[column]) for r in self.memory() if r["phase"] in ("forward", "eval")]

    def toggles(self) -> list[dict]:
        return [e for e in self.doc["events"] if e["kind"] in ("toggle", "refused")]


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_GRAD_FROM", "EVAL_FROM")}
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **extra}


def _start(name: str, work: Path) -> Run:
    script, ats, env = RUNS[name]
    if ats is None:
        cmd, folder = [sys.executable, str(SCRIPTS / "plain_count.py"), str(SCRIPTS / script)], None
    else:
        folder = work / name.replace(" ", "-")
        cmd = [sys.executable, str(ROOT / "main.py"), "watch", "--out", str(folder),
               *[a for at in ats for a in ("--at", at)], str(SCRIPTS / script)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(env), timeout=240,
                          cwd=work)
    return Run(done, folder)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    work = tmp_path_factory.mktemp("toggles")
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(_start, name, work) for name in RUNS}
    return {name: f.result() for name, f in futures.items()}


def _ok(run: Run) -> Run:
    assert run.code == 0, run.err[-2000:]
    return run


def _samples(run: Run, phase: str, column: str) -> dict[int, int]:
    return {int(r["step"]): int(r[column]) for r in run.memory() if r["phase"] == phase}


# --- each key on a script as users write it -------------------------------------------------

def test_no_grad_eval_on_a_plain_loop_drops_the_validation_graph_and_changes_no_result(runs):
    watched, plain, edited = _ok(runs["loop"]), _ok(runs["loop plain"]), \
        _ok(runs["loop no_grad"])
    assert watched.lines == plain.lines  # every loss and validation loss, bit for bit
    assert len(watched.lines) == 8
    # activations at the end of each model call: plain torch's for the script with
    # `with torch.no_grad():` written around its validation from step 3
    assert watched.forwards() == edited.act
    assert watched.forwards() != plain.act
    no_grad = watched.toggles()[0]
    assert (no_grad["step"], no_grad["key"], no_grad["old"], no_grad["new"]) == (
        3, "no_grad_eval", False, True)
    assert no_grad["message"].startswith("results unchanged")
    # the effect, computed as the lab computes it, says what the toggle did
    assert no_grad["effect"]["text"].startswith("no_grad_eval: false -> true:")
    assert no_grad["effect"]["text"].endswith(no_grad["message"])


def test_a_toggle_to_what_the_script_already_does_is_a_no_op_said_as_such(runs):
    watched, plain = _ok(runs["loop"]), _ok(runs["loop plain"])
    zero = watched.toggles()[1]
    assert (zero["key"], zero["old"], zero["new"]) == ("zero_grad", "set_to_none", "set_to_none")
    assert zero["message"] == "no-op: the script calls zero_grad(set_to_none=True)"
    assert zero["effect"]["text"].startswith("zero_grad=set_to_none: no-op")
    grads = _samples(watched, "zero_grad", "grads_bytes")
    assert set(grads.values()) == {0} and plain.grads[1:] == [0] * 7


def test_eval_mode_and_zero_grad_off_move_what_the_edited_script_moves(runs):
    watched, edited, plain = _ok(runs["loop eval"]), _ok(runs["loop eval edited"]), \
        _ok(runs["loop plain"])
    # before the first toggle: the plain run's losses; after: the hand-edited script's
    # (model.eval() around validation from step 3, no zero_grad from step 5)
    assert watched.lines[:3] == plain.lines[:3]
    assert watched.lines == edited.lines
    assert watched.lines[3:] != plain.lines[3:]  # Dropout off in validation changes them
    assert watched.forwards() == edited.act  # Dropout's mask no longer saved
    grads = _samples(watched, "zero_grad", "grads_bytes")
    params = PARAM * (32 * 64 + 64 + 64 * 4 + 4)
    # the gradients stay from step 5 (the edited script makes no zero_grad call to count)
    assert [grads[s] for s in range(1, 8)] == [0] * 4 + [params] * 3
    assert edited.grads[1:] == [0] * 4
    eval_mode, off = watched.toggles()
    assert eval_mode["message"].startswith("results change as model.eval() does")
    assert (off["key"], off["old"], off["new"], off["step"]) == ("zero_grad", "set_to_none",
                                                                  "off", 5)


def test_amp_on_a_function_based_loop_is_autocast_around_forward_and_loss(runs):
    watched, edited = _ok(runs["function"]), _ok(runs["function edited"])
    # the edited script wraps `logits = model(x); loss = F.cross_entropy(...)` in
    # torch.autocast from step 3 (bf16) and 5 (fp16); before that it is the plain script
    assert watched.lines == edited.lines
    casts = watched.forwards("amp_casts_bytes")
    acts = watched.forwards()
    assert [a + c for a, c in zip(acts, casts, strict=True)] == edited.act
    # autocast's copies kept for backward: 2 bytes a weight of each Linear whose input
    # requires grad (the first's input is the data: its weight copy is not saved)
    half = 2 * (48 * 48 + 48 * 3)
    assert casts == [0] * 3 + [half] * 5
    bf16, fp16 = watched.toggles()
    assert (bf16["old"], bf16["new"], fp16["old"], fp16["new"]) == ("off", "bf16", "bf16",
                                                                   "fp16")
    assert "AMP numerics" in bf16["message"] and "none on CPU" in fp16["message"]


def test_set_to_none_on_a_class_based_trainer_frees_the_gradients_and_changes_no_result(runs):
    watched, plain = _ok(runs["class"]), _ok(runs["class plain"])
    assert watched.lines == plain.lines  # losses and accuracies, bit for bit
    params = PARAM * (16 * 40 + 40 + 40 * 2 + 2)
    grads = _samples(watched, "zero_grad", "grads_bytes")
    assert plain.grads[1:] == [params] * 7  # the script's own zero_grad(set_to_none=False)
    assert [grads[s] for s in range(1, 8)] == [params] * 2 + [0] * 5
    set_none, no_grad = watched.toggles()
    assert (set_none["old"], set_none["new"]) == ("zeros", "set_to_none")
    # its validation already runs under no_grad: the toggle says so and changes nothing
    assert (no_grad["old"], no_grad["new"]) == (True, True)
    assert no_grad["message"] == "no-op: the script's evaluation forwards run under no_grad"
    # what the script itself does, said while the override is in force
    assert watched.doc["techniques"]["uses"]["zero_grad"] == (
        "the script calls zero_grad(set_to_none=False)")
    assert watched.doc["techniques"]["in_force"]["zero_grad"] == "set_to_none"


def test_detach_state_on_an_rnn_carrying_its_state_stops_the_growth(runs):
    # the edited script (hidden = hidden.detach() from step 4) is the plain one before it
    watched, edited = _ok(runs["rnn"]), _ok(runs["rnn edited"])
    assert watched.lines == edited.lines
    assert watched.forwards() == edited.act
    grew = watched.forwards()[:5]
    assert all(b > a for a, b in itertools.pairwise(grew))  # what the toggle stopped
    assert len(set(watched.forwards()[5:])) == 1
    (toggle,) = watched.toggles()
    assert (toggle["old"], toggle["new"]) == (False, True)
    assert "truncated backpropagation" in toggle["message"]
    uses = watched.doc["techniques"]["uses"]["detach_state"]
    assert uses.startswith("the script carries state with its graph: `hidden` given to model")


def test_no_grad_and_eval_mode_on_a_gans_sample_leave_its_training_alone(runs):
    # the edited script (the sample under no_grad from iteration 2, netG.eval() around it
    # from iteration 4) is the plain one before them
    watched, edited = _ok(runs["gan"]), _ok(runs["gan edited"])
    assert watched.lines == edited.lines
    assert watched.forwards() == edited.act
    no_grad, eval_mode = watched.toggles()
    assert (no_grad["old"], no_grad["new"], eval_mode["old"], eval_mode["new"]) == (
        False, True, False, True)
    # the generator's training call (backwarded) ran under grad: only the sample moved
    assert [r for r in watched.memory() if r["phase"] == "eval"]


# --- safety: a toggle that makes the script raise ---------------------------------------------

def test_a_no_grad_forward_the_script_backwards_later_turns_the_toggle_off(runs):
    r = runs["refit"]
    assert r.code == 1  # the script's own error, as it would raise with no_grad written in
    assert r.err.rstrip().splitlines()[-1].startswith("  ") or "RuntimeError" in r.err
    assert "element 0 of tensors does not require grad" in r.err
    assert "memlens watch: no_grad_eval=true made the script raise" in r.err
    refused = r.toggles()[-1]
    assert refused["kind"] == "refused" and refused["key"] == "no_grad_eval"
    assert "refit_validation.py:18" in refused["message"]
    doc = r.doc
    assert doc["finished"] is True and doc["summary"]["stopped_by"] == "error"
    assert doc["techniques"]["overrides"] == {}


def test_a_forward_that_raises_under_a_toggle_runs_again_and_the_run_goes_on(runs):
    r, plain = _ok(runs["input grad"]), _ok(runs["input grad plain"])
    assert r.lines == plain.lines
    _, refused = r.toggles()
    assert refused["kind"] == "refused" and refused["key"] == "no_grad_eval"
    assert "it was run again as the script wrote it" in refused["message"]
    assert r.doc["summary"]["stopped_by"] == "completed"


# --- from code, and bad input ----------------------------------------------------------------

def test_memlens_watch_at_in_code_applies_a_change_at_a_step(tmp_path):
    import torch
    from torch import nn

    import memlens

    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memlens.watch(out=tmp_path / "run", quiet=True, at=["2:zero_grad=zeros"]) as w:
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(5, 6)).sum().backward()
            opt.step()
    (toggle,) = [e for e in w.events if e.kind == "toggle"]
    assert (toggle.step, toggle.old, toggle.new) == (2, "set_to_none", "zeros")
    rows = list(csv.DictReader((tmp_path / "run" / "memory.csv").open()))
    grads = {int(r["step"]): int(r["grads_bytes"]) for r in rows if r["phase"] == "zero_grad"}
    assert grads == {1: 0, 2: PARAM * (6 * 3 + 3), 3: PARAM * (6 * 3 + 3)}
    with pytest.raises(ValueError, match=r"accumulate.*cannot be toggled on a watched script"):
        memlens.watch(out=tmp_path / "bad", at=["1:accumulate=2"])


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), "watch", *args],
                          capture_output=True, text=True, env=_env({}), cwd=cwd, timeout=120)


@pytest.mark.parametrize("at, said", [
    ("3:amp=int8", "amp: 'int8' is not valid; use one of off, bf16, fp16, or script"),
    ("3:retain_graph=true", "'retain_graph' cannot be toggled on a watched script"),
    ("x:amp=bf16", "'x' is not a step number"),
    ("3amp", "expected STEP:KEY=VALUE"),
])
def test_a_bad_toggle_is_refused_in_one_line_before_the_script_runs(tmp_path, at, said):
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    done = _cli("--at", at, str(script), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("memlens watch: --at") and said in line


def test_a_step_beyond_the_run_or_a_script_that_never_trains_exits_2_in_one_line(tmp_path):
    short = tmp_path / "short.py"
    short.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad(); model(torch.randn(2, 3)).sum().backward(); opt.step()
        print("trained")
    """))
    idle = tmp_path / "idle.py"
    idle.write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    beyond = _cli("--out", str(tmp_path / "a"), "--at", "50:amp=bf16", str(short), cwd=tmp_path)
    assert beyond.returncode == 2 and beyond.stdout == "trained\n"
    lines = [ln for ln in beyond.stderr.splitlines() if "--at" in ln]
    assert lines == ["memlens watch: --at 50:amp=bf16 never applied: the run's last step "
                     "was 2"]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["finished"] is True
    never = _cli("--at", "0:zero_grad=off", str(idle), cwd=tmp_path)
    assert never.returncode == 2 and never.stdout == "2.0\n"
    assert never.stderr.splitlines()[-1] == (
        "memlens watch: --at 0:zero_grad=off: the script made no training step (no optimizer "
        "step, no backward), so there was nothing to toggle")
