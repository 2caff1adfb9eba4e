"""Recording a user's own, unmodified training: `watch()` hooks it, `Watch` records it."""

from __future__ import annotations

from memlens.core.watch.session import Watch, watch

__all__ = ["Watch", "watch"]
