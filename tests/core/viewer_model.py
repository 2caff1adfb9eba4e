"""What PyTorch's memory tools compute from a snapshot, modelled for the tests.

`viewer_peak` follows torch/utils/viz/MemoryViz.js (the page behind pytorch.org/memory_viz
and `_memory_viz trace_plot`): annotate_snapshot folds a free_requested directly followed by
a free_completed of the same address into one 'free'; process_alloc_data then pairs frees
with allocations by address, treats a free of an unknown address and an active block of
the final segments that no recorded allocation accounts for as allocated from the start,
and takes the maximum running total. It is written from that behaviour, not from our
exporter, so a test comparing the two can fail.
"""

from __future__ import annotations

import base64
import json
import re

# Opcodes the viewer's JavaScript unpickler implements (MemoryViz.js `unpickle`).
VIEWER_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MEMOIZE",
    "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "SHORT_BINUNICODE", "BINUNICODE",
    "BININT", "BININT1", "BININT2", "LONG1", "APPEND", "APPENDS", "SETITEM", "SETITEMS",
    "DICT", "LIST", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NEWTRUE", "NEWFALSE", "NONE",
    "BINFLOAT",
}


def annotated(trace: list[dict]) -> list[dict]:
    out: list[dict] = []
    for e in trace:
        prev = out[-1] if out else None
        if (e["action"] == "free_completed" and prev is not None
                and prev["action"] == "free_requested" and prev["addr"] == e["addr"]):
            out[-1] = {**prev, "action": "free"}
            continue
        out.append(e)
    return out


def viewer_peak(snapshot: dict, device: int) -> int:
    elements: list[dict] = []
    initially: list[int] = []
    actions: list[int] = []
    addr_to_alloc: dict[int, int] = {}
    for e in annotated(snapshot["device_traces"][device]):
        if e["action"] == "alloc":
            elements.append(e)
            addr_to_alloc[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] in ("free", "free_completed"):
            if e["addr"] in addr_to_alloc:
                actions.append(addr_to_alloc.pop(e["addr"]))
            else:
                elements.append(e)
                initially.append(len(elements) - 1)
                actions.append(len(elements) - 1)
    for seg in snapshot["segments"]:
        if seg["device"] != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in addr_to_alloc:
                elements.append({"size": b.get("requested_size", b["size"])})
                initially.append(len(elements) - 1)
            addr += b["size"]
    current = set(initially)
    total = sum(elements[i]["size"] for i in initially)
    peak = 0
    for i in actions:
        if i in current:
            current.remove(i)
            total -= elements[i]["size"]
        else:
            current.add(i)
            total += elements[i]["size"]
        peak = max(peak, total)
    return peak


def snapshot_from_html(html: str):
    """The snapshot that `_memory_viz trace_plot` embedded in its page."""
    import pickle

    match = re.search(r"const local_files = (\[.*?\])\n", html, re.S)
    assert match, "no embedded snapshot in the trace_plot page"
    files = json.loads(match.group(1))
    return pickle.loads(base64.b64decode(files[0]["base64"]))


def format_size(num: float) -> str:
    """_memory_viz's size format (Bytes.__repr__): e.g. '2.0KiB'."""
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"):
        if abs(num) < 1024.0:
            return f"{num:3.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}YiB"
