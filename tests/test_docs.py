"""The docs name only files that exist: every `path/to/file.py` of this repository named in
README.md and docs/ (in backticks or as a link) is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Paths into this repository start with one of its folders (`app/`, `core/` and `resources/`
# are links into memlens/); a file a run or a report writes (`charts/x.svg`) or another
# project's (`ATen/core/TensorBase.h`) is not one.
OURS = ("app", "core", "memlens", "tests", "tools", "benchmarks", "examples", "docs",
        "resources", ".ci")
_EXT = r"(?:py|h|cpp|md|toml|png|svg|json|sh|txt|qss)"
QUOTED = re.compile(rf"`((?:{'|'.join(map(re.escape, OURS))})/[A-Za-z0-9_./-]+\.{_EXT})`")
LINKED = re.compile(rf"\]\(([A-Za-z0-9_./-]+\.{_EXT})(?:#[^)]*)?\)")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_repository_path_the_docs_name_exists():
    missing = []
    for doc in documents():
        text = doc.read_text(encoding="utf-8")
        for m in QUOTED.finditer(text):
            if not (ROOT / m.group(1)).exists():
                missing.append(f"{doc.relative_to(ROOT)}: `{m.group(1)}`")
        for m in LINKED.finditer(text):
            if not (doc.parent / m.group(1)).exists():
                missing.append(f"{doc.relative_to(ROOT)}: ({m.group(1)})")
    assert missing == []


def test_the_check_sees_the_paths_it_must():
    """The patterns find what the docs name (a pattern that matched nothing would pass)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert len(QUOTED.findall(text)) >= 5
    assert QUOTED.findall("see `core/missing_module.py` and `ATen/core/x.h`") == [
        "core/missing_module.py"]
