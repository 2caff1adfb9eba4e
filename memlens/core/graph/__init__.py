"""The autograd graph of a step: capture (torch), plain-data snapshots, layout and export.

Importing this package is cheap: `GraphSnapshot` is plain data; `GraphCapture` (which needs
torch) is loaded on first use.
"""

from __future__ import annotations

from typing import Any

from memlens.core.graph.snapshot import GraphEdge, GraphNode, GraphSnapshot, SavedTensor

__all__ = ["GraphCapture", "GraphEdge", "GraphNode", "GraphSnapshot", "SavedTensor"]


def __getattr__(name: str) -> Any:
    if name == "GraphCapture":
        from memlens.core.graph.capture import GraphCapture

        return GraphCapture
    raise AttributeError(f"module 'memlens.core.graph' has no attribute {name!r}")
