"""What `fix` found and measured: fix.json (a list, one entry a fix), fix.diff (the patch
against the user's files) and the text printed per fix (its diff, memory before -> after,
the step-time ratio with its interval, whether the results stayed the same, what it did).

With several fixes in one patch the runs are the whole patch's: each entry says which
others were measured with it (`measured_with`). A diagnosis of the patched run is mapped
back to the user's lines (difflib over the two texts) to tell whether a fix's is gone.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from memlens.core.fix.plan import Fix, Planner, fix_text, split_where
from memlens.core.fix.runs import WatchedRun, figures, printed_difference, step_time_ratio
from memlens.core.units import format_bytes

FIX_JSON, FIX_DIFF = "fix.json", "fix.diff"


def unified(old: str, new: str, path: Path, copy: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        str(path), copy))


def line_map(old: str, new: str) -> dict[int, int]:
    """Each line of the new text -> the old line it stands for (an inserted or changed line:
    the first old line of the block it replaces or comes before)."""
    a, b = old.splitlines(), new.splitlines()
    out: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, _, j1, j2 in matcher.get_opcodes():
        for j in range(j1, j2):
            out[j + 1] = i1 + (j - j1) + 1 if tag == "equal" else min(i1 + 1, max(len(a), 1))
    return out


class Report:
    """The entries of one fix run (call `entries()` once both runs are in)."""

    def __init__(self, planner: Planner, fixes: list[Fix], before: WatchedRun,
                 after: WatchedRun | None, fixed_dir: Path, copies: dict[Path, Path]) -> None:
        self.planner, self.fixes, self.before, self.after = planner, fixes, before, after
        self.fixed_dir, self.copies = fixed_dir, copies  # user's file -> its copy

    # --- per fix -----------------------------------------------------------------------------
    def entries(self) -> list[dict]:
        applied = [f for f in self.fixes if f.applied]
        before = figures(self.before)
        after = figures(self.after) if self.after is not None else None
        ratio = step_time_ratio(self.before, self.after) if self.after is not None else None
        difference = printed_difference(self.before, self.after) if self.after else None
        left = self._after_places()
        out = []
        for f in self.fixes:
            entry = {"kind": f.kind, "keys": f.keys, "where": f.where,
                     "diagnosis": f.message, "applied": f.applied, "why_not": f.refused,
                     "change": f.rule.change if f.rule else None,
                     "does": f.rule.does if f.rule and f.applied else None,
                     "diff": self._diff(f) if f.applied else "", "before": before,
                     "after": after if f.applied else None,
                     "step_time_ratio": None, "results_equal": None, "results_reason": None,
                     "diagnosis_gone": None, "measured_with": []}
            if f.applied and self.after is not None:
                entry["step_time_ratio"] = {**ratio.as_dict(),
                                            "text": ratio.describe("step time")}
                entry["results_equal"], entry["results_reason"] = _results(
                    f, applied, difference, self.before, self.after)
                entry["diagnosis_gone"] = not any(
                    k in f.keys and path == f.path and f.lines[0] <= line <= f.lines[1]
                    for k, path, line in left)
                entry["measured_with"] = [g.where for g in applied if g is not f]
            out.append(entry)
        return out

    def new_diagnoses(self) -> list[str]:
        """Diagnoses of the patched run at a place no fix answers for, as `key at file:line`
        of the user's file (a problem the fix uncovered, or one it could not change)."""
        answered = [(k, f.path, f.lines) for f in self.fixes for k in f.keys]
        out = []
        for key, path, line in self._after_places():
            if not any(k == key and p == path and lo <= line <= hi
                       for k, p, (lo, hi) in answered):
                out.append(f"{key} at {path}:{line}")
        return out

    def _diff(self, f: Fix) -> str:
        src = self.planner.sources[f.path]
        copy = self.copies.get(f.path)
        name = str(copy.relative_to(self.fixed_dir.parent)) if copy else str(f.path)
        return unified(src.text, fix_text(self.planner, f), f.path, name)

    def _after_places(self) -> list[tuple[str, Path, int]]:
        """The patched run's diagnoses as (key, the user's file, the user's line)."""
        if self.after is None:
            return []
        back = {copy.resolve(): path for path, copy in self.copies.items()}
        maps: dict[Path, dict[int, int]] = {}
        out = []
        for d in self.after.diagnoses:
            place = split_where(d.get("where") or "")
            if place is None:
                continue
            path, line = place
            original = back.get(path.resolve(), path.resolve())
            if original in self.planner.sources and path.resolve() in back:
                if original not in maps:
                    maps[original] = line_map(self.planner.sources[original].text,
                                              path.read_text(encoding="utf-8"))
                line = maps[original].get(line, line)
            out.append((d["key"], original, line))
        return out


def _results(f: Fix, applied: list[Fix], difference: str | None, before: WatchedRun,
             after: WatchedRun) -> tuple[bool | None, str]:
    """(results_equal, why): the script's printed lines compared, and where they differ,
    whether that is this fix's design, another fix's, or not expected."""
    if difference is None:
        n = len(before.stdout.splitlines())
        return True, f"the script printed the same {n} lines and ended the same way"
    if f.rule is not None and f.rule.changes_results:
        return None, f"{f.rule.changes_results} ({difference})"
    others = [g for g in applied if g is not f and g.rule and g.rule.changes_results]
    if others:
        return None, (f"the patch's fix at {others[0].where} ({others[0].kind}) changes the "
                      f"results by design ({difference})")
    return False, difference


def write(out: Path, entries: list[dict], patch_diff: str) -> None:
    (out / FIX_JSON).write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    (out / FIX_DIFF).write_text(patch_diff, encoding="utf-8")


# --- the printed text ---------------------------------------------------------------------------
def text(entries: list[dict], steps: int, new: list[str]) -> str:
    if not entries:
        return "memlens fix: the watch found nothing to fix (no diagnosis in "\
               f"{steps} steps); fix.json is []\n"
    lines = []
    for i, e in enumerate(entries, 1):
        head = f"[{i}] {', '.join(e['keys'])} at {e['where']}"
        if not e["applied"]:
            lines.append(f"{head}\n    not changed: {e['why_not']}")
            continue
        lines.append(f"{head}: {e['kind']}")
        lines += ["    " + ln for ln in e["diff"].rstrip("\n").splitlines()]
        if e["after"] is not None:
            b, a = e["before"], e["after"]
            if b["exit_code"] != a["exit_code"] or b["steps"] != a["steps"]:
                lines.append(f"    the original ran {b['steps']} steps (exit code "
                             f"{b['exit_code']}), the patched copy {a['steps']} (exit code "
                             f"{a['exit_code']}): their figures cover different steps")
            lines.append("    memory: " + memory_line(b, a))
            lines.append("    " + time_line(e))
            lines.append("    results: " + results_line(e))
            if e["diagnosis_gone"] is False:
                lines.append("    the diagnosis is still reported by the patched copy")
        lines.append(f"    what it did: {e['does']}")
        if e["measured_with"]:
            lines.append(f"    (measured together with the fix at {', '.join(e['measured_with'])})")
    lines += [f"new in the patched copy: {n}" for n in new]
    return "\n".join(lines) + "\n"


def memory_lines(before: dict, after: dict) -> list[str]:
    """Each memory figure, before -> after."""
    def pair(key: str) -> str:
        return f"{format_bytes(before[key])} → {format_bytes(after[key])}"

    return [f"peak {pair('peak_bytes')}",
            f"saved for backward in a step {pair('saved_bytes')}",
            f"held across steps {pair('held_bytes')}",
            f"growth {_per_step(before['growth_bytes_per_step'])} → "
            f"{_per_step(after['growth_bytes_per_step'])} a step"]


def memory_line(before: dict, after: dict) -> str:
    return ", ".join(memory_lines(before, after))


def time_line(entry: dict) -> str:
    r = entry["step_time_ratio"] or {}
    if r.get("ratio") is None:
        return "step time: not measured (too few steps)"
    low, high = r.get("ci_low"), r.get("ci_high")
    interval = (f" (95% CI {low:.3f}–{high:.3f})" if low is not None and high is not None
                else " (too few steps for an interval)")
    # Each side's steps come from one process: a change of the machine's load between the
    # two processes is not in the interval (docs/fix.md)
    return (f"step time ×{r['ratio']:.3f}{interval}: {r['text']} (two processes, one after "
            "the other)")


def results_line(entry: dict) -> str:
    equal = entry["results_equal"]
    word = {True: "unchanged", False: "CHANGED", None: "changed by design"}[equal]
    return f"{word}: {entry['results_reason']}"


def _per_step(value: float | None) -> str:
    return "n/a" if value is None else format_bytes(value, signed=True)
