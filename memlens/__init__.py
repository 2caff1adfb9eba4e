"""memlens as a library: `memlens.watch(...)` records your own training loop.

Nothing heavy is imported by `import memlens`: torch and the recorder load at first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Watch", "watch"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import core.watch

        return getattr(core.watch, name)
    raise AttributeError(f"module 'memlens' has no attribute {name!r}")
