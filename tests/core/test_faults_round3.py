"""The third fault audit (#34): overwrites, unbounded work, freezes, tracebacks, signals and
unclear messages, each a case that must end in exit 2 and one line (or a whole, bounded
result), never a traceback, a killed process or a changed file."""

from __future__ import annotations

import json
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.core.runfolder.history_files import write_history
from tests.core.helpers import run

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "batch_size=16", "width=32", "eval_every=0"]
MEMORY_LIMIT = 4 << 30  # address space a child may take: a case that allocates without bound
# fails with MemoryError here instead of growing until the kernel kills it


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def cli(*args, cwd: Path = ROOT, timeout: float = 300, env: dict | None = None):
    """main.py in a child under MEMORY_LIMIT: (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *map(str, args)], cwd=cwd,
        capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_memory,
        env={**os.environ, "OMP_NUM_THREADS": "1", "QT_QPA_PLATFORM": "offscreen",
             **(env or {})})
    return proc.returncode, proc.stdout, proc.stderr


def refused_in_one_line(code: int, err: str, command: str) -> str:
    """The one refusal line of `command`, after checking the exit code and no traceback."""
    assert code == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith(f"memlens {command}:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def snapshot_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links as their target's path), for a before/after compare."""
    out = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_symlink():
            out[key] = os.readlink(p).encode()
        elif p.is_file():
            out[key] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good") / "run"
    history, _summary = run("mlp", steps=3)
    write_history(history, folder)
    return folder


SCRIPT = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(int(sys.argv[1])):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


# --- 1. overwrites ------------------------------------------------------------------------------


def test_watch_out_over_a_finished_run_is_refused_and_leaves_it_whole(tmp_path, script):
    out = tmp_path / "w"
    code, _, err = cli("watch", script, "--out", out, "--", "2")
    assert code == 0, err
    before = snapshot_of(out)
    assert {"steps.csv", "memory.csv", "run.json"} <= set(before)
    line = refused_in_one_line(*cli("watch", script, "--out", out, "--", "3")[::2], "watch")
    assert "already holds a run" in line and "--force" in line
    assert snapshot_of(out) == before


@pytest.mark.parametrize("command", ["run", "watch"])
def test_a_planted_steps_csv_link_is_never_followed(tmp_path, script, command):
    target = tmp_path / "precious.txt"
    target.write_text("the user's own file\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.csv").symlink_to(target)
    args = (["run", "--steps", "2", *TINY, "--quiet"] if command == "run"
            else ["watch", script])
    tail = [] if command == "run" else ["--", "2"]
    line = refused_in_one_line(*cli(*args, "--out", out, *tail)[::2], command)
    assert "steps.csv" in line
    assert target.read_text() == "the user's own file\n" and (out / "steps.csv").is_symlink()
    code, _, err = cli(*args, "--force", "--out", out, *tail)  # the link goes, not its target
    assert code == 0, err
    assert target.read_text() == "the user's own file\n"
    assert not (out / "steps.csv").is_symlink()
    assert len((out / "steps.csv").read_text().splitlines()) == 1 + 2


def test_lessons_out_into_an_interrupted_reports_folder_keeps_its_runs(tmp_path, good_run):
    out = tmp_path / "report"
    for arm in ("mlp-zero_grad-off", "mlp-zero_grad-on"):  # killed before lessons.json
        shutil.copytree(good_run, out / "runs" / arm)
    before = snapshot_of(out)
    line = refused_in_one_line(*cli("lessons", "--lesson", "zero_grad", "--steps", "2",
                                    *TINY[:3], "--out", out)[::2], "lessons")
    assert "already holds a lessons report" in line and "--force" in line
    assert snapshot_of(out) == before


# --- 2. out of memory -------------------------------------------------------------------------


@pytest.mark.parametrize("args,command", [
    (["graph", "--set", "width=65536", "--out", "{out}/g.dot"], "graph"),
    (["lessons", "--lesson", "zero_grad", "--steps", "2", "--set", "width=65536",
      "--out", "{out}/report"], "lessons"),
])
def test_a_model_too_big_for_memory_is_refused_before_it_is_built(tmp_path, args, command):
    code, _, err = cli(*[a.format(out=tmp_path) for a in args])
    line = refused_in_one_line(code, err, command)
    assert "needs about" in line and "is available" in line and "force=true" in line
    assert list(tmp_path.iterdir()) == []  # nothing made: no folder, no report


def _write_pickle(path: Path, doc) -> Path:
    path.write_bytes(pickle.dumps(doc, protocol=4))
    return path


READ_IN_CHILD = """
import json, sys
from memlens.core.snapshot_file import read_snapshot
t = read_snapshot(sys.argv[1])
print(json.dumps({"categories": {k: int(v[-1]) for k, v in t.categories.items()},
                  "allocated_end": int(t.allocated[-1]), "actions": t.actions,
                  "top": [[a.size, len(a.frames), max(map(len, a.frames), default=0)]
                          for a in t.top], "live": t.live_at_peak}))
"""


def read_in_child(path: Path) -> dict:
    """read_snapshot in a child under MEMORY_LIMIT: the reading must fit there."""
    proc = subprocess.run([sys.executable, "-c", READ_IN_CHILD, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_memory)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_thirty_thousand_categories_are_drawn_as_a_few_curves_and_other(tmp_path):
    from memlens.core.snapshot_file import MAX_CATEGORIES, OTHER_CATEGORY

    n = 30_000
    sizes = [(i % 97 + 1) * 512 for i in range(n)]
    trace = [{"action": "alloc", "addr": 4096 * i, "size": sizes[i], "category": f"c{i}"}
             for i in range(n)]
    path = _write_pickle(tmp_path / "snapshot.pickle", {"device_traces": [trace],
                                                         "segments": []})
    assert path.stat().st_size < 2 << 20
    got = read_in_child(path)
    assert len(got["categories"]) == MAX_CATEGORIES + 1
    # the curves together hold every byte, the largest categories on their own
    assert sum(got["categories"].values()) == sum(sizes) == got["allocated_end"]
    largest = sorted(range(n), key=lambda i: -sizes[i])[:MAX_CATEGORIES]
    assert {f"c{i}" for i in largest} | {OTHER_CATEGORY} == set(got["categories"])


def test_one_huge_stack_shared_by_every_allocation_is_read_once(tmp_path):
    from memlens.core.snapshot_file import MAX_FRAMES, MAX_TEXT, TOP_ALLOCATIONS

    frame = {"filename": "train.py", "line": 12, "name": "f" * 5000}
    frames = [frame] * 1_000_000  # one list in the pickle's memo, as torch shares stacks
    n = 100_000
    trace = [{"action": "alloc", "addr": 4096 * i, "size": 512 + i, "frames": frames}
             for i in range(n)]
    path = _write_pickle(tmp_path / "snapshot.pickle", {"device_traces": [trace],
                                                         "segments": []})
    assert path.stat().st_size < 8 << 20
    got = read_in_child(path)
    assert got["live"] == n and got["actions"] == n
    assert [t[0] for t in got["top"]] == [512 + i for i in range(n - 1, n - 1 - TOP_ALLOCATIONS,
                                                                 -1)]
    assert all(t[1] == MAX_FRAMES and t[2] <= MAX_TEXT + 1 for t in got["top"])


# --- 3. freeze: long strings -------------------------------------------------------------------


def test_a_fifty_megabyte_string_in_run_json_is_cut_on_load(tmp_path, good_run):
    from memlens.core.runfolder.format import MAX_JSON_TEXT
    from memlens.core.runfolder.reader import load_run

    folder = tmp_path / "long"
    shutil.copytree(good_run, folder)
    doc = json.loads((folder / "run.json").read_text())
    huge = "x" * 50_000_000
    doc["environment"]["memory_label"] = huge
    doc["events"].append({"step": 1, "time_s": 0.1, "kind": "error", "message": huge})
    doc["notes"] = [[{"deep": huge}]]
    (folder / "run.json").write_text(json.dumps(doc))
    history = load_run(folder)
    texts = []
    stack = [history.meta]
    while stack:
        node = stack.pop()
        for v in (node.values() if isinstance(node, dict) else node):
            if isinstance(v, str):
                texts.append(v)
            elif isinstance(v, dict | list):
                stack.append(v)
    texts += [e.message for e in history.events()]
    assert max(map(len, texts)) == MAX_JSON_TEXT + 1  # cut, marked with "…"
    assert history.meta["environment"]["memory_label"] == "x" * MAX_JSON_TEXT + "…"
    assert history.meta["environment"]["device"] == doc["environment"]["device"]


def test_shot_open_with_a_fifty_megabyte_string_saves_its_picture(tmp_path, good_run):
    folder = tmp_path / "long"
    shutil.copytree(good_run, folder)
    doc = json.loads((folder / "run.json").read_text())
    doc["events"].append({"step": 1, "time_s": 0.1, "kind": "error", "key": "x" * 50_000_000,
                          "message": "y" * 50_000_000})
    (folder / "run.json").write_text(json.dumps(doc))
    code, _, err = cli("shot", "--open", folder, "--out", tmp_path / "s.png")
    assert code == 0, err[-2000:]
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- 4. tracebacks where one line belongs --------------------------------------------------


def _trace(**fields) -> dict:
    event = {"action": "alloc", "addr": 4096, "size": 512, "frames": []}
    event.update(fields)
    return {"device_traces": [[event]], "segments": []}


def _nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


SNAPSHOTS = {
    "size 2**70": _trace(size=2**70),
    "sizes summing past int64": {"device_traces": [[
        {"action": "alloc", "addr": 4096 * i, "size": 2**61, "frames": []} for i in range(9)]],
        "segments": []},
    "action a list": _trace(action=["alloc"]),
    "frames an int": _trace(frames=5),
    "blocks an int": {"device_traces": [[]], "segments": [
        {"device": 0, "total_size": 1024, "blocks": 7}]},
    "device_traces [5]": {"device_traces": [5], "segments": []},
    "category a nested list": _trace(category=_nested(5_000)),
    "size text of 600 KB": _trace(size="9" * 600_000),
}


def write_snapshot(folder: Path, name: str) -> Path:
    """SNAPSHOTS[name] pickled as a snapshot file in `folder`."""
    path = folder / "snapshot.pickle"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # to write the nested case; reading it needs none
    try:
        path.write_bytes(pickle.dumps(SNAPSHOTS[name], protocol=4))
    finally:
        sys.setrecursionlimit(limit)
    return path


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_a_snapshot_with_wrong_types_or_sizes_is_one_short_line(tmp_path, name):
    path = write_snapshot(tmp_path, name)
    line = refused_in_one_line(*cli("shot", "--open", path, "--out", tmp_path / "s.png")[::2],
                               "shot")
    assert str(path) in line and len(line) < 600
    assert not (tmp_path / "s.png").exists()


def test_sixty_thousand_categories_open_in_shot(tmp_path):
    trace = [{"action": "alloc", "addr": 4096 * i, "size": 512, "category": f"c{i}"}
             for i in range(60_000)]
    path = _write_pickle(tmp_path / "snapshot.pickle", {"device_traces": [trace],
                                                         "segments": []})
    code, _, err = cli("shot", "--open", path, "--out", tmp_path / "s.png")
    assert code == 0, err[-2000:]
    assert (tmp_path / "s.png").is_file()


def _config_preset_number(doc):
    doc["config"]["preset"] = 5


def _environment_lists(doc):
    doc["environment"] = {k: [1] for k in doc["environment"]}


def _environment_label_number(doc):
    doc["environment"]["memory_label"] = 7


@pytest.mark.parametrize("damage,named", [
    (_config_preset_number, "config.preset"), (_environment_lists, "environment."),
    (_environment_label_number, "environment.memory_label"),
])
@pytest.mark.parametrize("command", ["shot", "app"])
def test_run_json_values_of_the_wrong_type_are_one_line(tmp_path, good_run, damage, named,
                                                        command):
    folder = tmp_path / "typed"
    shutil.copytree(good_run, folder)
    doc = json.loads((folder / "run.json").read_text())
    damage(doc)
    (folder / "run.json").write_text(json.dumps(doc))
    out = ["--out", tmp_path / "s.png"] if command == "shot" else []
    # app --open shows the window once the folder reads: a bounded wait if it wrongly does
    line = refused_in_one_line(*cli(command, "--open", folder, *out, timeout=60)[::2],
                               command)
    assert "run.json" in line and named in line


def test_a_garbage_allocations_header_is_one_line(tmp_path, good_run):
    folder = tmp_path / "npy"
    shutil.copytree(good_run, folder)
    head = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little")
    (folder / "allocations.npy").write_bytes(head + b"{'descr': '''" + b" " * 100 + b"\n")
    (folder / "frames.jsonl").write_text('"x"\n')
    line = refused_in_one_line(*cli("shot", "--open", folder, "--out", tmp_path / "s.png")[::2],
                               "shot")
    assert "allocations.npy" in line


MODEL_BASE = """
import torch
from torch import nn
def build_model():
    return nn.Linear(4, 2)
def make_batch(step, split):
    return torch.randn(8, 4), torch.randint(0, 2, (8,))
"""


def _model_file(tmp_path: Path, head: str = "", build: str = "") -> Path:
    source = head + MODEL_BASE
    if build:
        source = source.replace("    return nn.Linear(4, 2)", build)
    path = tmp_path / "model.py"
    path.write_text(source)
    return path


def _config_unhashable(tmp_path):
    return _model_file(tmp_path, "CONFIG = {[1]: 2}\n")


def _config_long_expression(tmp_path):
    return _model_file(tmp_path, "CONFIG = {'lr': " + "+".join(["1"] * 50_000) + "}\n")


def _str_raises(tmp_path):
    return _model_file(tmp_path, build="""    class Odd(Exception):
        def __str__(self):
            raise RuntimeError("no text")
    raise Odd()""")


def _no_such_user(tmp_path):
    return "~memlens-no-such-user/model.py"


def _link_loop(tmp_path):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    return tmp_path / "a.py"


@pytest.mark.parametrize("make", [_config_unhashable, _config_long_expression, _str_raises,
                                  _no_such_user, _link_loop])
def test_a_model_file_or_preset_path_that_cannot_be_used_is_one_line(tmp_path, make):
    preset = make(tmp_path)
    line = refused_in_one_line(*cli("run", "--preset", preset, "--steps", "1", "--quiet",
                                    "--out", tmp_path / "r")[::2], "run")
    assert len(line) < 1000


def test_a_toml_nested_fifty_thousand_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 50_000 + "]" * 50_000 + "\n")
    line = refused_in_one_line(*cli("run", "--config", path, "--steps", "1", "--quiet",
                                    "--out", tmp_path / "r")[::2], "run")
    assert "deep.toml" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_shot_out_onto_a_folder_or_under_a_file_leaves_no_temporary(tmp_path, where):
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "adir").mkdir()
    out = tmp_path / ("adir" if where == "folder" else "afile/x.png")
    refused_in_one_line(*cli("shot", "--steps", "1", "--out", out)[::2], "shot")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["adir", "afile"]
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("out", ["afile", "afile/sub"])
def test_lessons_out_that_cannot_be_a_folder_is_refused_before_measuring(tmp_path, out):
    (tmp_path / "afile").write_text("mine")
    code, stdout, err = cli("lessons", "--lesson", "zero_grad", "--steps", "2", *TINY[:3],
                            "--out", tmp_path / out)
    line = refused_in_one_line(code, err, "lessons")
    assert err.strip().splitlines() == [line] and stdout == ""  # nothing was measured
    assert (tmp_path / "afile").read_text() == "mine"


# --- 5. signals -------------------------------------------------------------------------------


def _wait_for_rows(proc, csv: Path, rows: int) -> None:
    """Until `csv` has `rows` data rows or the child exits (its files are flushed row by row;
    the bound only keeps a broken child from hanging the suite)."""
    for _ in range(20_000):
        if csv.is_file() and len(csv.read_text().splitlines()) > rows:
            return
        try:
            proc.wait(timeout=0.05)
            return
        except subprocess.TimeoutExpired:
            pass


def _terminate(args: list, csv: Path, rows: int = 3):
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), *map(str, args)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1",
                                 "QT_QPA_PLATFORM": "offscreen"})
    try:
        _wait_for_rows(proc, csv, rows)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def test_watch_on_sigterm_finishes_run_json(tmp_path, script):
    out = tmp_path / "w"
    code, _, err = _terminate(["watch", script, "--out", out, "--", "100000000"],
                              out / "steps.csv")
    assert code == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "SIGTERM" in err
    rows = (out / "steps.csv").read_text().splitlines()[1:]
    doc = json.loads((out / "run.json").read_text())
    assert doc["summary"] is not None and doc["summary"]["steps_done"] == len(rows)
    assert doc["summary"]["extra"]["exit_code"] == 128 + signal.SIGTERM


def test_lessons_on_sigterm_writes_the_report(tmp_path):
    out = tmp_path / "report"
    code, _, err = _terminate(["lessons", "--lesson", "zero_grad", "--steps", "100000000",
                               *TINY[:3], "--quiet", "--out", out],
                              out / "runs" / "mlp-zero_grad-off" / "steps.csv")
    assert code == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "SIGTERM" in err
    report = json.loads((out / "lessons.json").read_text())
    assert report["stopped"] is True and (out / "lessons.md").is_file()
    for arm in ("off", "on"):
        folder = out / "runs" / f"mlp-zero_grad-{arm}"
        rows = (folder / "steps.csv").read_text().splitlines()[1:]
        summary = json.loads((folder / "run.json").read_text())["summary"]
        assert summary is not None and summary["steps_done"] == len(rows)


# --- 6. unclear or inconsistent -----------------------------------------------------------


@pytest.mark.parametrize("args,command,says", [
    (["run", "--preset", "", "--steps", "1"], "run", "preset: ''"),
    (["graph", "--preset", "", "--out", "{out}/g.dot"], "graph", "preset: ''"),
    (["lessons", "--preset", "", "--steps", "2", "--out", "{out}/l"], "lessons", "preset: ''"),
    (["watch", "{script}", "--out", "", "--", "1"], "watch", "--out ''"),
    (["watch", "{script}", "--capture-every", str(2**64), "--out", "{out}/w", "--", "1"],
     "watch", "--capture-every"),
    (["app", "--follow", "{script}"], "app", "--follow"),
])
def test_unclear_inputs_are_refused_like_their_siblings(tmp_path, script, args, command, says):
    work = tmp_path / "work"
    work.mkdir()
    code, _, err = cli(*[a.format(out=work, script=script) for a in args], cwd=tmp_path)
    line = refused_in_one_line(code, err, command)
    assert says in line
    assert list(work.iterdir()) == [] and not (tmp_path / "runs").exists()


def test_a_snapshot_field_is_never_echoed_in_full(tmp_path):
    path = _write_pickle(tmp_path / "snapshot.pickle", _trace(addr="a" * 600_000))
    line = refused_in_one_line(*cli("shot", "--open", path, "--out", tmp_path / "s.png")[::2],
                               "shot")
    assert "aaaaaaaaaa" not in line and len(line) < 600


def test_a_model_files_long_exception_is_cut_to_its_first_lines(tmp_path):
    body = "\\n".join(f"line {i} " + "x" * 200 for i in range(100))
    preset = _model_file(tmp_path, build=f'    raise ValueError("{body}")')
    line = refused_in_one_line(*cli("run", "--preset", preset, "--steps", "1", "--quiet",
                                    "--out", tmp_path / "r")[::2], "run")
    assert f"{preset}:5" in line and "ValueError" in line and "line 0" in line
    assert "line 99" not in line and len(line) < 1500


# --- 7. memory of a long light run ---------------------------------------------------------

RSS_IN_CHILD = """
import json, sys, tempfile
from memlens.core.config import RunConfig
from memlens.core.history import RunHistory
from memlens.core.synthetic import synthetic_training

def rss():
    with open("/proc/self/statm") as f:
        import os
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

class Probe:
    def __init__(self, history):
        self.history, self.points = history, []
    def __getattr__(self, name):
        return getattr(self.history, name)
    def on_steps(self, rows):
        self.history.on_steps(rows)
        for record, _ in rows:
            if (record.step + 1) % 25_000 == 0:
                self.points.append([record.step + 1, rss(), len(self.history.samples),
                                    len(self.history.steps)])

with tempfile.TemporaryDirectory() as d:
    history = RunHistory(spill_dir=d)
    probe = Probe(history)
    synthetic_training(RunConfig(steps=int(sys.argv[1])), sink=probe)
    print(json.dumps({"points": probe.points, "spilled": history.samples.spilled_rows,
                      "widths": [len(history.samples.columns), len(history.steps.columns)]}))
"""


def test_resident_memory_stays_flat_past_the_spill_point_over_200k_steps():
    """A light run of 200,000 synthetic steps: resident memory from step 50,000 (past the
    32,768-row spill point of both tables) to the end grows by far less than the rows added
    would take in memory. Figure in docs/benchmarks.md."""
    proc = subprocess.run([sys.executable, "-c", RSS_IN_CHILD, "200000"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    points = {p[0]: p for p in got["points"]}
    start, end = points[50_000], points[200_000]
    assert start[3] > 32_768 and start[2] > 32_768
    sample_width, step_width = got["widths"]
    added = ((end[2] - start[2]) * sample_width + (end[3] - start[3]) * step_width) * 8
    assert got["spilled"] > 0
    assert end[1] - start[1] < added / 10, (end[1] - start[1], added)
