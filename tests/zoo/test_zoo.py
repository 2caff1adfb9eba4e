"""The zoo: real training scripts, as their communities write them, watched by memlens.

Each case runs its script three times, as subprocesses: plain (`python SCRIPT ARGS`),
watched (`python main.py watch SCRIPT --out DIR -- ARGS`), and plain with ZOO_ACT=1 (the
script's own count of what autograd saves for backward, tests/zoo/scripts/zoo_truth.py).
The checks compare memlens's run folder, read as plain JSON and CSV (no memlens reader),
with what the scripts count themselves:

  final        the FINAL line (loss and a sha256 of every parameter) is the same watched
  exit         the exit code is the same watched, the expected one; a crash's last line too
  steps        steps.csv has one row per optimizer step the script made
  bytes        params / grads / optimizer bytes in memory.csv equal the script's own counts,
               after every step (its last `optimizer` row) and at the end (the last row)
  activations  activations (+ amp_casts) at each `forward` row equal what saved_tensors_hooks
               count on plain torch at the end of the same root module call: each storage
               once, parameters and buffers left out, whole where only the graph holds it,
               else the bytes the saved tensors reach (a batch sliced out of a dataset)
  grad_norm    steps.csv grad_norm is the 2-norm of the gradients the step's optimizers
               stepped (read by a step post-hook; with a closure, where it first returns
               inside the step: LBFGS's first evaluation, as its loss is); a step without
               detail (its samples carried) may leave it empty, never wrong
  diagnoses    the expected diagnoses (docs/watch.md keys) are reported, and no others

Known defects are `xfail(strict=True)`: the suite passes today and flips when one is fixed
(tests/zoo/FINDINGS.md says what each is). `python tests/zoo/test_zoo.py [ID ...]` runs the
cases and prints the findings table.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
MAIN = ROOT / "main.py"
CHECKS = ("final", "exit", "steps", "bytes", "activations", "grad_norm", "diagnoses")
TIMEOUT_S = 600

# docs/watch.md, "Diagnoses"
D1 = "forward under grad never backwarded"
D2 = "graph kept across steps"
D3 = "gradients never cleared"
D4 = "carried state without detach"
D5 = "validation in train mode"
D6 = "graph grows step after step"
D7 = "activations cached on a module"


@dataclass(frozen=True)
class Case:
    id: str
    script: str
    args: tuple[str, ...] = ()
    steps: int = 0  # optimizer steps the script makes (a GAN's D and G together: one)
    diagnoses: frozenset[str] = frozenset()
    exit_code: int = 0
    opt_per_step: int = 1  # Optimizer.step() calls in one step (a GAN: 2)
    needs: tuple[str, ...] = ()  # modules the script imports beyond torch
    slow: bool = False
    xfail: dict[str, str] = field(default_factory=dict)  # check -> the known defect
    ranks: int = 1  # a DDP job's processes: the checks read rank 0's folder, `steps` all


def case(id, script, args=(), **kw) -> Case:
    return Case(id, script, tuple(args), **kw)


LIGHTNING = ("lightning",)

# Known defects (tests/zoo/FINDINGS.md)
HF = ("transformers", "accelerate")

CASES = [
    # pytorch/examples, in their own shapes
    case("mnist", "mnist.py", ["--epochs", "2"], steps=16),
    case("word_language_model", "word_language_model.py", ["--epochs", "2"], steps=12),
    case("word_language_model_adamw", "word_language_model.py",
         ["--epochs", "2", "--use-optimizer"], steps=12),
    case("dcgan", "dcgan.py", ["--steps", "6"], steps=6, opt_per_step=2,
         diagnoses=frozenset({D1, D5})),  # the example's sample from fixed noise
    case("vae", "vae.py", ["--epochs", "2"], steps=8),
    case("siamese_network", "siamese_network.py", ["--epochs", "2"], steps=8),
    case("time_sequence_prediction", "time_sequence_prediction.py", ["--steps", "3"], steps=3),
    case("actor_critic", "actor_critic.py", ["--episodes", "6"], steps=6),
    case("super_resolution", "super_resolution.py", ["--epochs", "2"], steps=6),
    case("imagenet_resnet", "imagenet_resnet.py", ["--epochs", "2"], steps=8),
    # frameworks
    case("lightning_fp32", "lightning_module.py", ["--epochs", "2"], steps=32, needs=LIGHTNING),
    case("lightning_bf16", "lightning_module.py", ["--epochs", "2", "--precision", "bf16-mixed"],
         steps=32, needs=LIGHTNING),
    case("lightning_accum4", "lightning_module.py", ["--epochs", "2", "--accumulate", "4"],
         steps=8, needs=LIGHTNING),
    case("hf_trainer", "hf_trainer.py", ["--epochs", "2"], steps=32, needs=HF),
    case("hf_trainer_accum4", "hf_trainer.py", ["--epochs", "2", "--accum", "4"], steps=8,
         needs=HF),
    case("hf_loop", "hf_loop.py", ["--epochs", "2"], steps=16, needs=HF),
    case("accelerate_accumulate", "accelerate_accumulate.py", ["--epochs", "2"], steps=12,
         needs=HF),  # the wrapped optimizer steps every 2nd micro-batch
    case("lightning_ddp", "lightning_ddp.py", ["--epochs", "1"], steps=4, needs=LIGHTNING,
         ranks=2),  # rank 1 started again by Lightning, without memlens
    # techniques
    case("compile_aot_eager", "compiled.py", ["--steps", "8", "--backend", "aot_eager"],
         steps=8),  # the loop feeds X[step]: a view of its data
    case("compile_inductor", "compiled.py", ["--steps", "8"], steps=8, slow=True),
    case("checkpoint", "checkpointing.py", ["--steps", "6"], steps=6),
    case("checkpoint_reentrant", "checkpointing.py", ["--steps", "6", "--reentrant"], steps=6),
    case("slice_batches", "slice_batches.py", ["--epochs", "2"], steps=8),
    case("manual_grads", "manual_grads.py", ["--steps", "6"], steps=6),
    case("swa_update_bn", "swa.py", ["--epochs", "3"], steps=12),
    case("accumulate_by_hand", "accumulate_by_hand.py", ["--epochs", "2"], steps=8),
    case("dataloader_workers", "dataloader_workers.py", ["--epochs", "2"], steps=12),
    case("epoch_last_loss", "epoch_last_loss.py", ["--epochs", "3"], steps=12),
    case("saliency", "saliency.py", ["--steps", "6"], steps=6),  # autograd.grad of an image
    # bugs
    case("bug_val_outputs_kept", "bug_val_outputs_kept.py", ["--steps", "8"], steps=8,
         diagnoses=frozenset({D1})),
    case("bug_total_loss", "bug_total_loss.py", ["--epochs", "2"], steps=12,
         diagnoses=frozenset({D2})),
    case("bug_hidden_retain_graph", "bug_hidden_retain.py", ["--steps", "6"], steps=1,
         exit_code=1, diagnoses=frozenset({D4})),
    case("bug_hidden_no_detach", "bug_hidden_no_detach.py", ["--steps", "4"], steps=1,
         exit_code=1, diagnoses=frozenset({D4})),
    case("bug_no_zero_grad", "bug_no_zero_grad.py", ["--steps", "6"], steps=6,
         diagnoses=frozenset({D3})),
    case("bug_growing_graph", "bug_growing_graph.py", ["--steps", "10"], steps=10,
         diagnoses=frozenset({D6})),
    case("bug_val_dict", "bug_val_dict.py", ["--steps", "6"], steps=6,
         diagnoses=frozenset({D1})),
    case("bug_module_cache", "bug_module_cache.py", ["--steps", "6"], steps=6,
         diagnoses=frozenset({D7})),
    case("bug_lightning_kept_losses", "bug_lightning_kept_losses.py", ["--epochs", "1"],
         steps=6, needs=LIGHTNING, diagnoses=frozenset({D2})),
    case("bug_hf_compute_loss_kept", "bug_hf_compute_loss_kept.py", ["--accum", "2"],
         steps=6, needs=HF, diagnoses=frozenset({D2})),
]
BY_ID = {c.id: c for c in CASES}


# --- running ------------------------------------------------------------------------------

def _env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("ZOO_ACT", None)
    # the zoo runs the watch as a user does: its default detail (auto), not the suite's
    env.pop("MEMLENS_WATCH_DETAIL", None)
    env.update(QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONHASHSEED="0", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")
    env.update(extra)
    return env


@dataclass
class Run:
    code: int
    out: str
    err: str
    seconds: float


def _run(cmd: list[str], cwd: Path, **env) -> Run:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=_env(**env), capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    return Run(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)


@dataclass
class Result:
    case: Case
    plain: Run
    watched: Run
    truth: Run
    folder: Path


def run_case(c: Case, work: Path) -> Result:
    """The three runs of a case (plain, watched, plain with ZOO_ACT=1), in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    script = str(SCRIPTS / c.script)
    folder = work / "run"
    plain = _run([sys.executable, script, *c.args], work)
    watched = _run([sys.executable, str(MAIN), "watch", script, "--out", str(folder), "--",
                    *c.args], work)
    truth = _run([sys.executable, script, *c.args], work, ZOO_ACT="1")
    return Result(c, plain, watched, truth, folder / "rank0" if c.ranks > 1 else folder)


# --- what the scripts print ---------------------------------------------------------------

def _line(out: str, prefix: str) -> str | None:
    found = [ln for ln in out.splitlines() if ln.startswith(prefix)]
    return found[-1] if found else None


def _fields(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)\b", line)}


def _truth_steps(out: str) -> dict[int, dict[str, int]]:
    """TRUTH k ...: the counts right after the k-th Optimizer.step()."""
    rows = {}
    for ln in out.splitlines():
        if ln.startswith("TRUTH "):
            rows[int(ln.split()[1])] = _fields(ln)
    return rows


def _acts(out: str) -> list[tuple[int, int, int, int]]:
    """(k, grad, graph bytes, storages) of each root module call of the loop (not those autograd's
    backward makes: checkpoint's recomputation)."""
    acts = []
    for ln in out.splitlines():
        if ln.startswith("ACT "):
            f = _fields(ln)
            if not f["backward"]:
                acts.append((int(ln.split()[1]), f["grad"], f["graph"], f["bytes"]))
    return acts


def _gnorms(out: str) -> dict[int, float]:
    """GNORM k sq=S: the sum of squares of the gradients the k-th Optimizer.step() stepped."""
    found = {}
    for ln in out.splitlines():
        if ln.startswith("GNORM "):
            found[int(ln.split()[1])] = float(ln.split("sq=")[1])
    return found


def _script_steps(c: Case, out: str) -> int | None:
    line = _line(out, "STEPS ")
    if line is not None:
        return int(line.split()[1])
    truth = _truth_steps(out)  # a crash: the optimizer steps it made before
    return max(truth) // c.opt_per_step if truth else None


def _last_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("memlens watch")
             and not ln.startswith(("  diagnosis:", "    at ", "    fix:"))]
    return lines[-1] if lines else ""


# --- the run folder, as plain files -------------------------------------------------------

def _csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _int(v: str | None) -> int:
    return int(float(v)) if v not in (None, "") else 0


# --- the checks ---------------------------------------------------------------------------

def check(r: Result, name: str) -> tuple[bool, str]:
    """(passed, what was seen) for check `name` of a case's runs."""
    return _CHECKS[name](r)


def _check_final(r: Result):
    a, b = _line(r.plain.out, "FINAL "), _line(r.watched.out, "FINAL ")
    if r.case.exit_code == 0 and a is None:
        return False, f"plain run printed no FINAL line (exit {r.plain.code}): {r.plain.err[-400:]}"
    if a != b:
        return False, f"plain {a!r} watched {b!r}"
    return True, a or "(no FINAL: the script stops with an error, both ways)"


def _check_exit(r: Result):
    c = r.case
    if (r.plain.code, r.watched.code) != (c.exit_code, c.exit_code):
        return False, (f"exit plain {r.plain.code} watched {r.watched.code}, expected "
                       f"{c.exit_code}; watched stderr: {r.watched.err[-600:]}")
    if c.exit_code:
        a, b = _last_error_line(r.plain.err), _last_error_line(r.watched.err)
        if a != b:
            return False, f"error line differs: plain {a!r} watched {b!r}"
    return True, f"exit {r.plain.code} both ways"


def _check_steps(r: Result):
    c = r.case
    own = _script_steps(c, r.plain.out)
    rows = _csv(r.folder / "steps.csv")
    if own != c.steps:
        return False, f"the script counts {own} steps, the table says {c.steps} (zoo error)"
    if len(rows) != own:
        return False, f"steps.csv has {len(rows)} rows, the script made {own} optimizer steps"
    for rank in range(1, c.ranks):  # every rank recorded, as many steps (DDP's lockstep)
        other = r.folder.parent / f"rank{rank}"
        doc = json.loads((other / "run.json").read_text()) if (other / "run.json").exists() \
            else {}
        if doc.get("world_size") != c.ranks or len(_csv(other / "steps.csv")) != own:
            return False, (f"rank {rank}: {other} has {len(_csv(other / 'steps.csv'))} rows "
                           f"and world_size {doc.get('world_size')}")
    return True, f"{own} steps" + (f" on each of {c.ranks} ranks" if c.ranks > 1 else "")


def _check_bytes(r: Result):
    c = r.case
    mem = _csv(r.folder / "memory.csv")
    if not mem:
        return False, "memory.csv has no rows"
    bad = []
    end = _line(r.plain.out, "BYTES ")
    if end is not None:
        want = _fields(end)
        last = mem[-1]
        got = {k: _int(last[f"{k}_bytes"]) for k in ("params", "grads", "optimizer")}
        diff = {k: (got[k], want[k]) for k in got if got[k] != want[k]}
        if diff:
            bad.append(f"at the end (last row, step {last['step']} {last['phase']}): "
                       + ", ".join(f"{k} {g} vs true {w}" for k, (g, w) in diff.items()))
        # The scripts make every parameter before training: each row holds all of them.
        wrong = [row for row in mem if _int(row["params_bytes"]) != want["params"]]
        if wrong:
            w = wrong[0]
            bad.append(f"params in {len(wrong)} of {len(mem)} rows, first step {w['step']} "
                       f"{w['phase']}: {w['params_bytes']} vs true {want['params']}")
    truth = _truth_steps(r.plain.out)
    by_step: dict[int, dict] = {}
    for row in mem:
        if row["phase"] == "optimizer":
            by_step[int(row["step"])] = row
    for step, row in sorted(by_step.items()):
        want = truth.get((step + 1) * c.opt_per_step)
        if want is None:
            continue
        got = {k: _int(row[f"{k}_bytes"]) for k in ("params", "grads", "optimizer")}
        diff = {k: (got[k], want[k]) for k in got if got[k] != want[k]}
        if diff:
            bad.append(f"step {step} optimizer row: "
                       + ", ".join(f"{k} {g} vs true {w}" for k, (g, w) in diff.items()))
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return False, "; ".join(bad[:3]) + more
    return True, f"{len(by_step)} steps and the end"


def _check_activations(r: Result):
    c = r.case
    acts = _acts(r.truth.out)
    if r.truth.code != c.exit_code:
        return False, f"the ZOO_ACT run exited {r.truth.code}: {r.truth.err[-300:]}"
    want: dict[int, list[tuple[int, int]]] = {}
    for k, grad, graph, storages in acts:
        if grad:
            want.setdefault(k // c.opt_per_step, []).append((graph, storages))
    got: dict[int, list[int]] = {}
    carried: set[int] = set()  # steps without detail (core.watch.detail): nothing measured
    for row in _csv(r.folder / "memory.csv"):
        if row.get("carried") == "1":
            carried.add(int(row["step"]))
        elif row["phase"] == "forward":
            got.setdefault(int(row["step"]), []).append(
                _int(row["activations_bytes"]) + _int(row["amp_casts_bytes"]))
    bad = []
    if carried & set(got) or carried & set(range(3)):
        bad.append(f"steps both carried and measured, or among the first 3: "
                   f"{sorted(carried & (set(got) | set(range(3))))}")
    for step in sorted((set(want) | set(got)) - carried):
        w, g = want.get(step, []), got.get(step, [])
        if len(w) != len(g):
            bad.append(f"step {step}: {len(g)} forward rows {g}, {len(w)} root forwards "
                       f"under grad {[x[0] for x in w]}")
            continue
        for i, (gi, (wi, storages)) in enumerate(zip(g, w, strict=True)):
            if gi != wi:
                bad.append(f"step {step} forward {i}: {gi} vs true {wi} (the saved tensors' "
                           f"whole storages: {storages})")
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return False, "; ".join(bad[:3]) + more
    n = sum(len(v) for s, v in want.items() if s not in carried)
    return True, f"{n} forwards" + (f"; {len(carried)} steps without detail" if carried else "")


def _check_grad_norm(r: Result):
    c = r.case
    sq = _gnorms(r.plain.out)
    if not sq:
        return True, "no optimizer: no grad norm to check"
    bad = []
    rows = _csv(r.folder / "steps.csv")
    # a step without detail (its samples carried: core.watch.detail) may leave it empty
    carried = {int(row["step"]) for row in _csv(r.folder / "memory.csv")
               if row.get("carried") == "1"}
    empty = 0
    for row in rows:
        step = int(row["step"])
        ks = range(step * c.opt_per_step + 1, (step + 1) * c.opt_per_step + 1)
        if not all(k in sq for k in ks):
            continue  # a step that never stepped (a crash)
        want = sum(sq[k] for k in ks) ** 0.5
        got = float(row["grad_norm"]) if row["grad_norm"] else None
        if got is None and step in carried:
            empty += 1
        elif got is None or abs(got - want) > 1e-3 * max(want, 1e-12):
            bad.append(f"step {step}: {got} vs true {want:.6g}")
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return False, f"{len(bad)} of {len(rows)} steps: " + "; ".join(bad[:3]) + more
    return True, f"{len(rows) - empty} steps" + (
        f"; {empty} steps without detail left empty" if empty else "")


def _check_diagnoses(r: Result):
    doc = r.folder / "run.json"
    if not doc.exists():
        return False, "no run.json"
    events = json.loads(doc.read_text()).get("events", [])
    found = {}
    for e in events:
        if e.get("kind") == "diagnosis":
            found.setdefault(e["key"], e)
    want = r.case.diagnoses
    if set(found) != set(want):
        extra = {k: f"{found[k]['message']} at {Path(found[k]['where'] or '').name}"
                 for k in set(found) - set(want)}
        return False, (f"expected {sorted(want) or 'none'}, got {sorted(found) or 'none'}"
                       + (f"; extra: {extra}" if extra else ""))
    return True, ", ".join(sorted(found)) or "none"


_CHECKS = {"final": _check_final, "exit": _check_exit, "steps": _check_steps,
           "bytes": _check_bytes, "activations": _check_activations,
           "grad_norm": _check_grad_norm,
           "diagnoses": _check_diagnoses}


# --- pytest -------------------------------------------------------------------------------

def _available(c: Case) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in c.needs)


@pytest.fixture(scope="session")
def zoo_results(tmp_path_factory):
    cache: dict[str, Result] = {}

    def get(c: Case) -> Result:
        if c.id not in cache:
            cache[c.id] = run_case(c, tmp_path_factory.mktemp(c.id))
        return cache[c.id]
    return get


def _params():
    for c in CASES:
        for name in CHECKS:
            marks = [pytest.mark.zoo]
            if c.slow:
                marks.append(pytest.mark.slow)
            if name in c.xfail:
                marks.append(pytest.mark.xfail(strict=True, reason=c.xfail[name]))
            if not _available(c):
                marks.append(pytest.mark.skip(reason=f"needs {', '.join(c.needs)}"))
            yield pytest.param(c, name, marks=marks, id=f"{c.id}-{name}")


@pytest.mark.parametrize("c, name", list(_params()))
def test_zoo(zoo_results, c: Case, name: str):
    ok, seen = check(zoo_results(c), name)
    assert ok, seen


# --- the findings table -------------------------------------------------------------------

def main(ids: list[str]) -> int:
    cases = [BY_ID[i] for i in ids] if ids else [c for c in CASES if _available(c)]
    work = Path(tempfile.mkdtemp(prefix="memlens-zoo-"))
    t0 = time.perf_counter()
    print("| case | " + " | ".join(CHECKS) + " | plain s | watched s |")
    print("|" + " --- |" * (len(CHECKS) + 3))
    details = []
    for c in cases:
        r = run_case(c, work / c.id)
        cells = []
        for name in CHECKS:
            ok, seen = check(r, name)
            known = " (xfail)" if name in c.xfail else ""
            cells.append(("ok" if ok else "FAIL") + known)
            details.append(f"{c.id} {name}: {'ok' if ok else 'FAIL'}: {seen}")
        print(f"| {c.id} | " + " | ".join(cells)
              + f" | {r.plain.seconds:.1f} | {r.watched.seconds:.1f} |", flush=True)
    print(f"\nzoo: {len(cases)} cases in {time.perf_counter() - t0:.0f} s (runs in {work})\n")
    print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
