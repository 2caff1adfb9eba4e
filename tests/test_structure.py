"""The house a reader (and a tool) can hold: every import resolvable from the checkout alone,
no import circle, modules, functions and classes of a readable size, and the run folder's
format written in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "memlens"
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_METHODS = 600, 80, 40


def sources(*folders: str):
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_an_editor_goes_from_an_import_in_the_app_to_its_file_in_core():
    jedi = pytest.importorskip("jedi")
    path = PACKAGE / "app" / "window" / "main_window.py"
    text = path.read_text()
    line_no, line = next((i, s) for i, s in enumerate(text.splitlines(), 1)
                         if s.startswith("from memlens.core.config import RunConfig"))
    script = jedi.Script(code=text, path=str(path), project=jedi.Project(str(ROOT)))
    (target,) = script.goto(line_no, line.index("RunConfig"), follow_imports=True)
    assert Path(target.module_path) == PACKAGE / "core" / "config.py"
    assert target.name == "RunConfig" and target.type == "class"


def _import_graph():
    grimp = pytest.importorskip("grimp")
    # Imports under `if TYPE_CHECKING:` never run (a helper module annotating the class it
    # serves): not a circle at import time, and not an edge of the layer rules either.
    return grimp.build_graph("memlens", exclude_type_checking_imports=True)


def test_a_static_reader_sees_the_real_imports_and_no_circle():
    graph = _import_graph()
    modules = set(graph.modules)
    assert {"memlens.core.recorder.recorder", "memlens.app.window.main_window",
            "memlens.cli.run"} <= modules
    edges = {m: graph.find_modules_directly_imported_by(m) for m in modules}
    assert sum(map(len, edges.values())) > 300  # the imports are seen, not 2 of them
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    assert circles == []


def test_modules_functions_and_classes_are_of_a_size_a_reader_can_hold():
    too_big = []
    for path in sources("memlens", "benchmarks"):
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if text.count("\n") > MAX_MODULE_LINES:
            too_big.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    too_big.append(f"{rel}:{node.lineno} {node.name}(): {n} lines")
            elif isinstance(node, ast.ClassDef):
                n = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
                if n > MAX_METHODS:
                    too_big.append(f"{rel}:{node.lineno} class {node.name}: {n} methods")
    assert too_big == []


def test_the_run_folder_s_file_names_are_written_once():
    from memlens.core.runfolder.format import RUN_FILE_NAMES

    home = PACKAGE / "core" / "runfolder" / "format.py"
    names = set(RUN_FILE_NAMES)
    elsewhere = []
    for path in sources("memlens"):
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert elsewhere == []


def test_the_public_api_is_typed_and_listed():
    import memlens

    assert {"watch", "Watch", "__version__"} <= set(dir(memlens))
    assert (PACKAGE / "py.typed").is_file()
    from memlens.core.watch.api import Watch, watch

    assert memlens.watch is watch and memlens.Watch is Watch
    # the user's API only: what torch's hooks and the frameworks call is the session's
    public = {n for n in dir(Watch) if not n.startswith("_")}
    assert public == {"phase", "step", "close", "folder", "step_index", "events", "write_error",
                      "detail"}
    hints = watch.__annotations__
    assert {"models", "optimizers", "out", "precise", "capture_every", "return"} <= set(hints)


def test_no_dead_names_vulture_at_80_percent():
    """vulture finds no unused name at 80% confidence; the few it takes for unused that an
    interface requires are listed, with why, in tests/vulture_whitelist.py."""
    pytest.importorskip("vulture")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "vulture", str(PACKAGE),
                           str(ROOT / "tests" / "vulture_whitelist.py"), "--min-confidence", "80"],
                          capture_output=True, text=True, timeout=300)
    assert done.stdout == "" and done.returncode == 0, done.stdout + done.stderr
