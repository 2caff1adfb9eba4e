"""Lessons: verdicts against a fake step clock, interleaving, stop, and memory figures that
equal `run`'s and plain torch's own counts."""

from __future__ import annotations

import csv
import json
import threading
import time

import numpy as np
import pytest
import torch

import memlens.core.lessons.runner
import memlens.core.loop
import memlens.core.recorder.recorder
from memlens.core.lessons.catalog import LESSONS, Claim
from memlens.core.lessons.interleave import Turns, TurnSink
from memlens.core.lessons.runner import LessonRunner
from memlens.core.lessons.verdict import exact_verdict, time_verdict
from memlens.core.stats import ratio_of_medians

TINY = {"batch_size": 32, "width": 64}
TWENTY_FASTER = Claim("about 20% faster", "lower", -0.20)


class FakeStepClock:
    """Phase times with seeded lognormal noise (and an occasional slow step from another
    process, as on a shared machine), `rate` times the base: a known true effect."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = np.random.default_rng(seed)
        self.t = 0.0

    def __call__(self) -> float:
        self.t += self.phase_s()
        return self.t

    def phase_s(self) -> float:
        hiccup = 3.0 if self.rng.random() < 0.05 else 1.0
        return 0.002 * self.rate * hiccup * float(self.rng.lognormal(0.0, 0.15))

    def steps_ms(self, n: int) -> list[float]:
        return [1e3 * sum(self.phase_s() for _ in range(4)) for _ in range(n)]


# --- verdict logic ---------------------------------------------------------------------------
def test_a_real_20_percent_difference_is_found_and_none_is_within_noise_mostly():
    found = noise = 0
    reps = 40
    for seed in range(reps):
        off = FakeStepClock(1.0, seed).steps_ms(30)
        faster = FakeStepClock(0.8, 1000 + seed).steps_ms(30)
        same = FakeStepClock(1.0, 2000 + seed).steps_ms(30)
        if time_verdict(ratio_of_medians(off, faster), TWENTY_FASTER) == "confirmed":
            found += 1
        if time_verdict(ratio_of_medians(off, same), TWENTY_FASTER) == "within noise":
            noise += 1
    assert found >= 0.9 * reps, found
    assert noise >= 0.8 * reps, noise


def test_time_verdicts_name_direction_and_size():
    off = FakeStepClock(1.0, 1).steps_ms(60)
    assert time_verdict(ratio_of_medians(off, FakeStepClock(0.5, 2).steps_ms(60)),
                        TWENTY_FASTER) == "larger"
    assert time_verdict(ratio_of_medians(off, FakeStepClock(0.93, 3).steps_ms(200)),
                        TWENTY_FASTER) == "smaller"
    assert time_verdict(ratio_of_medians(off, FakeStepClock(1.3, 4).steps_ms(60)),
                        TWENTY_FASTER) == "contradicted"
    assert time_verdict(ratio_of_medians(off, FakeStepClock(1.3, 4).steps_ms(60)), None) == ""


def test_exact_verdicts():
    thirty = Claim("about 30% less memory", "lower", -0.30)
    assert exact_verdict(1000, 700, thirty) == "confirmed"
    assert exact_verdict(1000, 300, thirty) == "larger"
    assert exact_verdict(1000, 950, thirty) == "smaller"
    assert exact_verdict(1000, 1200, thirty) == "contradicted"
    assert exact_verdict(1000, 1000, thirty) == "not seen"
    grows = Claim("leaks", "higher")
    assert exact_verdict(0, 4096, grows) == "confirmed"
    assert exact_verdict(0, 0, grows) == "not seen"
    # a process figure's noise: under its floor a difference is not seen
    assert exact_verdict(300, 700, grows, floor=512) == "not seen"
    assert exact_verdict(300, 10_000, grows, floor=512) == "confirmed"


# --- interleaving ----------------------------------------------------------------------------
def test_arms_take_turns_in_blocks_abba():
    turns = Turns(2)
    log: list[int] = []
    steps, block = 8, 2

    def arm(i: int) -> None:
        sink = TurnSink(turns, i, block, steps)
        sink.on_start({})
        for _ in range(steps):
            log.append(i)  # the "step" runs only while it is this arm's turn
            sink.on_steps([(None, ())])
        sink.on_finish({})

    threads = [threading.Thread(target=arm, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    blocks = [log[i] for i in range(0, len(log), block)]
    assert all(log[i] == log[i + 1] for i in range(0, len(log), block))
    assert blocks == [0, 1, 1, 0, 0, 1, 1, 0]


def test_an_arm_that_finishes_first_holds_its_thread_until_the_other_is_done():
    turns = Turns(2)
    released = threading.Event()
    seen_while_other_ran: list[bool] = []

    def arm(i: int, steps: int) -> None:
        sink = TurnSink(turns, i, 2, steps)
        sink.on_start({})
        for _ in range(steps):
            if i == 1:
                seen_while_other_ran.append(released.is_set())
            sink.on_steps([(None, ())])
        sink.on_finish({})
        turns.wait_all_finished()
        if i == 0:
            released.set()

    threads = [threading.Thread(target=arm, args=(0, 2)),
               threading.Thread(target=arm, args=(1, 8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(seen_while_other_ran) == 8 and not any(seen_while_other_ran)
    assert released.is_set()


def _fake_timing(monkeypatch, slower_arm: str, rate: float) -> None:
    """The loop's phase clock replaced: each arm's session gets its own fake clock, the
    `slower_arm` one `rate` times slower (arms run in threads named lesson-<arm>)."""
    made: dict[str, int] = {}  # clocks made per arm: seeds by arm, not by which thread ran first

    def timing(device, synchronize=True):
        name = threading.current_thread().name
        slow = name == f"lesson-{slower_arm}"
        made[name] = made.get(name, 0) + 1
        seed = 1000 * made[name] + (1 if slow else 0)
        return FakeStepClock(rate if slow else 1.0, seed), "fake clock"

    monkeypatch.setattr(memlens.core.recorder.recorder, "phase_clock", timing)
    # a fake machine, idle: the real one's load (other tests beside this one) is no part of it
    monkeypatch.setattr(memlens.core.lessons.runner, "load_average", lambda: 0.0)


def test_the_runner_finds_a_20_percent_slower_arm_on_a_fake_clock(monkeypatch):
    _fake_timing(monkeypatch, "on", 1.2)
    # enough rounds for the run's own splits to gauge the fake machine's noise (at 40 steps
    # the interval's low end sat at 0.99-1.01: which draws of the fake clock a phase got, as
    # the number of clock reads a step makes changed, decided the verdict)
    report = LessonRunner(["mlp"], steps=80, block=2, settings=TINY,
                          names=("zero_grad",)).run()
    row = next(r for r in report.rows if r.metric == "step time")
    assert row.significant and row.ci_low > 1.0
    assert 1.1 < row.change < 1.3


def test_stop_keeps_what_was_measured(tmp_path):
    runner = LessonRunner(["mlp"], steps=12, block=2, settings=TINY, out=tmp_path,
                          names=("zero_grad", "amp_bf16"))

    def progress(p):
        if p.lesson == "zero_grad" and p.steps_done >= 5:
            runner.stop()

    runner.progress = progress
    report = runner.run()
    assert report.stopped
    assert {r.lesson for r in report.rows} == {"zero_grad"}
    ran = {name: len(h.steps) for name, h in report.histories[("zero_grad", "mlp")].items()}
    assert 0 < sum(ran.values()) < 24
    for name, n in ran.items():  # the run folders hold every step that was measured
        with open(tmp_path / "runs" / f"mlp-zero_grad-{name}" / "steps.csv") as fh:
            assert len(list(csv.DictReader(fh))) == n


# --- memory figures ----------------------------------------------------------------------------
def _last(path, phase, column):
    with open(path / "memory.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["phase"] == phase]
    return int(rows[-1][column])


def test_memory_figures_equal_runs_made_with_run_and_plain_torch(tmp_path, capsys):
    import main

    steps = 6
    report = LessonRunner(["mlp"], steps=steps, block=2, settings=TINY, out=tmp_path / "l",
                          names=("zero_grad",)).run()
    row = next(r for r in report.rows if r.metric == "grads at zero_grad")
    for arm, mode in (("off", "zeros"), ("on", "set_to_none")):
        out = tmp_path / arm
        rc = main.main(["run", "--preset", "mlp", "--steps", str(steps), "--quiet",
                        "--set", "batch_size=32", "width=64", "eval_every=0",
                        f"zero_grad={mode}", "--out", str(out)])
        assert rc == 0
        assert getattr(row, arm) == _last(out, "zero_grad", "grads_bytes")
        assert row.runs[arm]
    # independent: zeros keeps one gradient per parameter, set_to_none none
    from memlens.core.config import RunConfig
    from memlens.core.preset_factory import build_preset

    preset = build_preset(RunConfig().with_values({"preset": "mlp", **TINY}),
                          torch.device("cpu"))
    param_bytes = sum(p.numel() * p.element_size() for p in preset.parameters())
    assert row.off == param_bytes and row.on == 0
    assert row.verdict == "confirmed"


def test_each_lesson_names_metrics_the_records_have():
    from memlens.core.history import SAMPLE_COLUMNS, STEP_COLUMNS
    from memlens.core.records import SAMPLE_PHASE_CODE

    for lesson in LESSONS:
        assert lesson.off != lesson.on
        for m in lesson.metrics:
            if m.source == "sample":  # "a+b": the sum of two columns
                assert set(m.column.split("+")) <= set(SAMPLE_COLUMNS)
            elif m.source == "step":
                assert m.column in STEP_COLUMNS
            elif m.source == "allocs":  # precise mode's events, within a phase
                assert m.phase in SAMPLE_PHASE_CODE and lesson.base.get("precise")
            else:
                assert m.source in ("errors", "data")
            if m.claim is not None:
                assert m.claim.direction in ("lower", "higher")


@pytest.mark.parametrize("bad", [["--set", "nope=1"], ["--lesson", "nope"], ["--steps", "1"]])
def test_bad_arguments_exit_2_with_a_message(tmp_path, capsys, bad):
    import main

    assert main.main(["lessons", "--out", str(tmp_path / "x"), *bad]) == 2
    assert "memlens lessons:" in capsys.readouterr().err
    assert not (tmp_path / "x" / "lessons.json").exists()


def test_cli_quick_writes_the_report_and_never_overwrites_one(tmp_path):
    from tests.core.test_cli_run import cli

    out = tmp_path / "rep"
    p = cli("lessons", "--quick", "--preset", "mlp", "--steps", "4", "--set", "batch_size=32",
            "width=64", "--lesson", "zero_grad", "leak_loss_sum_eval", "--out", str(out),
            "--quiet")
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "lessons.json").read_text())
    keys = {"lesson", "preset", "device", "metric", "off", "on", "change", "ci_low", "ci_high",
            "significant", "claim", "verdict", "runs"}
    assert doc["rows"] and all(keys <= set(r) for r in doc["rows"])
    assert {r["lesson"] for r in doc["rows"]} == {"zero_grad", "leak_loss_sum_eval"}
    leak = next(r for r in doc["rows"] if r["lesson"] == "leak_loss_sum_eval")
    assert leak["off"] == 0 and leak["on"] > 0 and leak["verdict"] == "confirmed"
    for name in ("mlp-zero_grad", "mlp-leak_loss_sum_eval"):
        assert (out / "charts" / f"{name}.svg").read_text().startswith("<svg")
        assert (out / "charts" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "lessons.md").read_text()
    assert "| mlp | zero_grad" in md
    before = (out / "lessons.json").read_bytes()
    p = cli("lessons", "--quick", "--steps", "4", "--out", str(out), "--quiet")
    assert p.returncode == 2 and "already holds a lessons report" in p.stderr
    assert (out / "lessons.json").read_bytes() == before


def test_compare_runs_gives_mean_and_peak_by_phase_and_category():
    from memlens.core.compare import compare_runs
    from tests.core.helpers import run, samples_at

    base, _ = run("mlp", steps=5, zero_grad="zeros")
    cur, _ = run("mlp", steps=5, zero_grad="set_to_none")
    rows = {(r.phase, r.category): r for r in compare_runs(base, cur)}
    assert ("eval", "grads") not in rows  # eval_every=0: neither run sampled eval
    assert ("zero_grad", "activations") not in rows  # neither holds any there
    grads = rows[("zero_grad", "grads")]
    expect = samples_at(base, "zero_grad", "grads")
    assert grads.base_mean == pytest.approx(expect.mean())
    assert grads.base_peak == expect.max()
    assert grads.peak == 0 and grads.peak_change == -expect.max()
    total = rows[("forward", "total")]
    assert total.mean == pytest.approx(samples_at(cur, "forward", "total").mean())


def test_no_grad_saving_equals_the_eval_forward_samples_of_run_and_plain_torch(tmp_path):
    import main
    from memlens.core.config import RunConfig, TechniqueToggles
    from memlens.core.preset_factory import build_preset
    from tests.core.test_article_lessons import saved_bytes_of

    steps = 4
    report = LessonRunner(["mlp"], steps=steps, block=2, settings=TINY,
                          names=("no_grad_eval",)).run()
    row = next(r for r in report.rows if r.metric == "eval-forward activations")
    held = {}
    for arm, flag in (("off", "false"), ("on", "true")):
        out = tmp_path / arm
        assert main.main(["run", "--preset", "mlp", "--steps", str(steps), "--quiet",
                          "--set", "batch_size=32", "width=64", "eval_every=1",
                          f"no_grad_eval={flag}", f"eval_mode={flag}", "--out", str(out)]) == 0
        held[arm] = _last(out, "eval_forward", "activations_bytes")
        assert getattr(row, arm) == held[arm]
    # independent: what one eval forward under grad, in train mode, saves for backward
    p = build_preset(RunConfig().with_values({"preset": "mlp", **TINY}), torch.device("cpu"))
    plain = saved_bytes_of(lambda: p.forward_eval(TechniqueToggles()), p.parameters())
    assert row.off - row.on == held["off"] - held["on"] == plain > 0
    # all of it goes, but after the forward: the claim is judged on the peak inside it
    # (tests/core/test_lessons_peaks.py), this figure is shown beside it
    assert row.verdict == ""


def test_ctrl_c_in_the_cli_writes_what_was_measured(tmp_path):
    import signal
    import subprocess
    import sys

    from tests.core.test_cli_run import ROOT

    out = tmp_path / "rep"
    p = subprocess.Popen(
        [sys.executable, str(ROOT / "main.py"), "lessons", "--preset", "mlp", "--steps", "50000",
         "--set", "batch_size=32", "width=64", "--lesson", "zero_grad", "amp_bf16",
         "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # as a terminal's: a test run in the background inherits SIGINT ignored, and
        # Python then installs no KeyboardInterrupt handler
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = b""
    # a log gets one line as each lesson starts; the steps it ran are in its arms' files
    while b"lesson 1/2: zero_grad on mlp" not in seen:
        chunk = p.stderr.read1(256)
        assert chunk, seen.decode(errors="replace")
        seen += chunk
    steps_csv = out / "runs" / "mlp-zero_grad-off" / "steps.csv"
    deadline = time.monotonic() + 200
    while not (steps_csv.exists() and len(steps_csv.read_text().splitlines()) > 3):
        assert p.poll() is None and time.monotonic() < deadline, seen.decode(errors="replace")
        time.sleep(0.05)  # polling a file the report writes: a condition, not a duration
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=240)
    assert p.returncode == 130, err.decode(errors="replace")
    doc = json.loads((out / "lessons.json").read_text())
    assert doc["stopped"] is True
    assert {r["lesson"] for r in doc["rows"]} == {"zero_grad"}
    row = next(r for r in doc["rows"] if r["metric"] == "grads at zero_grad")
    assert row["off"] > 0 and row["on"] == 0
    for arm in ("off", "on"):
        with open(out / "runs" / f"mlp-zero_grad-{arm}" / "steps.csv") as fh:
            assert 0 < len(list(csv.DictReader(fh))) < 50000
