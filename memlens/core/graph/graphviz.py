"""Finding and running a Graphviz `dot`: the system one, or graphviz-pure's (a pip dependency)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from memlens.core.graph.layout_types import Layout, LayoutRequest

PX_PER_INCH = 72.0  # layout pixels are Graphviz points
ENV_VAR = "MEMLENS_DOT"  # a dot binary to use instead of searching; "none" to disable


class DotError(RuntimeError):
    """dot is missing, failed, or ran past its time bound; the message says which."""


def find_dot() -> str | None:
    """The dot binary to run: $MEMLENS_DOT, the system `dot`, or `graphviz-pure`.

    graphviz-pure lands next to sys.executable in a virtual environment, which is often not
    on PATH (the venv was never activated), so look there too.
    """
    forced = os.environ.get(ENV_VAR)
    if forced:
        return None if forced.lower() == "none" else forced
    found = shutil.which("dot") or shutil.which("graphviz-pure")
    if found:
        return found
    bindir = Path(sys.executable).parent
    for name in ("graphviz-pure", "graphviz-pure.exe"):
        candidate = bindir / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def missing_text() -> str:
    """What to install when no dot is found: exact commands."""
    return (
        "Graphviz not found (no `dot` on PATH, no `graphviz-pure` next to "
        f"{sys.executable}). Using memlens' own layout; to get Graphviz layouts and SVG/PNG "
        f"from dot, install one: `{sys.executable} -m pip install graphviz-pure`, or the "
        "system package (`sudo apt install graphviz`, `brew install graphviz`)."
    )


def engine_name(dot: str) -> str:
    return "graphviz-pure" if "graphviz-pure" in Path(dot).name else "Graphviz dot"


class DotJob:
    """dot running in the background: start it, do other work, then collect or kill it."""

    def __init__(self, dot: str, source: str, args: list[str]) -> None:
        self.dot = dot
        self._out: bytes | None = None
        self._err = b""
        self._error: Exception | None = None
        try:
            self.proc = subprocess.Popen(
                [dot, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise DotError(f"cannot run {dot}: {exc.strerror or exc}") from exc
        self._thread = threading.Thread(target=self._talk, args=(source.encode("utf-8"),),
                                        name="dot", daemon=True)
        self._thread.start()

    def _talk(self, data: bytes) -> None:
        try:
            self._out, self._err = self.proc.communicate(data)
        except Exception as exc:  # a pipe error: reported by wait()
            self._error = exc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self._thread.join(5)

    def wait(self, timeout: float, should_stop: Callable[[], bool] | None = None) -> bytes:
        """dot's stdout; DotError if it fails, runs past `timeout` s, or `should_stop()`."""
        deadline = time.perf_counter() + timeout
        while self._thread.is_alive():
            if should_stop is not None and should_stop():
                self.kill()
                raise DotError("cancelled")
            left = deadline - time.perf_counter()
            if left <= 0:
                self.kill()
                raise DotError(f"{engine_name(self.dot)} did not finish within {timeout:.3g} s")
            self._thread.join(min(0.05, left))
        if self._error is not None:
            raise DotError(f"{engine_name(self.dot)} failed: {self._error}")
        if self.proc.returncode != 0:
            message = self._err.decode("utf-8", "replace").strip().splitlines()
            detail = next((m for m in message if "Warning" not in m), "") or "no message"
            raise DotError(f"{engine_name(self.dot)} failed (exit {self.proc.returncode}): "
                           f"{detail}")
        return self._out or b""


def run_dot(
    dot: str,
    source: str,
    args: list[str],
    *,
    timeout: float,
    should_stop: Callable[[], bool] | None = None,
) -> bytes:
    """Run dot on `source` with `args` (e.g. ["-Tsvg"]); stdout as bytes, or DotError."""
    return DotJob(dot, source, args).wait(timeout, should_stop)


class DotLayoutJob:
    """A dot layout running in the background (see layout_graph: it races our own)."""

    def __init__(self, request: LayoutRequest, dot: str) -> None:
        self.request = request
        self.started = time.perf_counter()
        index = {k: i for i, k in enumerate(request.ids)}
        self.edges = [e for e in dict.fromkeys(request.edges)
                      if e[0] in index and e[1] in index and e[0] != e[1]]
        lines = [
            "digraph G {",
            "graph [ranksep=0.5 nodesep=0.2]",
            'node [shape=box fixedsize=true label=""]',
        ]
        for i, (w, h) in enumerate(request.sizes):
            lines.append(f"n{i} [width={w / PX_PER_INCH:.4f} height={h / PX_PER_INCH:.4f}]")
        for s, d, style in self.edges:
            attr = " [dir=none]" if style == "none" else ""
            lines.append(f"n{index[s]} -> n{index[d]}{attr}")
        lines.append("}")
        self.job = DotJob(dot, "\n".join(lines), ["-Tplain"])

    def result(self, timeout: float, should_stop: Callable[[], bool] | None = None) -> Layout:
        text = self.job.wait(timeout, should_stop).decode("utf-8")
        return _parse_plain(text, self.request, self.edges, engine_name(self.job.dot),
                            time.perf_counter() - self.started)

    def kill(self) -> None:
        self.job.kill()



def _parse_plain(
    text: str, request: LayoutRequest, edges: list[tuple[str, str, str]],
    engine: str, seconds: float,
) -> Layout:
    height = 0.0
    pos: dict[int, tuple[float, float]] = {}
    splines: dict[tuple[int, int], list[tuple[float, float]]] = {}
    raw_width = 0.0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "graph":
            raw_width, height = float(parts[2]), float(parts[3])
        elif parts[0] == "node":
            pos[int(parts[1][1:])] = (float(parts[2]), float(parts[3]))
        elif parts[0] == "edge":
            n = int(parts[3])
            pts = [(float(parts[4 + 2 * j]), float(parts[5 + 2 * j])) for j in range(n)]
            splines.setdefault((int(parts[1][1:]), int(parts[2][1:])), pts)

    def px(p: tuple[float, float]) -> tuple[float, float]:
        return (p[0] * PX_PER_INCH, (height - p[1]) * PX_PER_INCH)

    if len(pos) != len(request.ids):
        raise DotError(f"{engine} returned {len(pos)} of {len(request.ids)} nodes")
    positions = {k: px(pos[i]) for i, k in enumerate(request.ids)}
    sizes = dict(zip(request.ids, request.sizes, strict=True))
    index = {k: i for i, k in enumerate(request.ids)}
    out_edges = []
    for s, d, style in edges:
        pts = splines.get((index[s], index[d]))
        if pts is None or len(pts) < 4:
            continue
        out_edges.append((s, d, style, tuple(px(p) for p in pts)))
    return Layout(positions, sizes, out_edges, raw_width * PX_PER_INCH,
                  height * PX_PER_INCH, engine, seconds)
