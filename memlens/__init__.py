"""memlens: see what a PyTorch training loop does to memory and to the autograd graph.

As a library, `memlens.watch(...)` records your own training loop (docs/watch.md). Nothing
heavy is imported by `import memlens`: torch and the recorder load at first use.

    memlens.core       the Qt-free engine: config, the recorder, measurement, run folders,
                       graph capture, exports, watch, the headless CLI
    memlens.app        the PySide6 desktop app (the only place Qt lives)
    memlens.resources  icon, stylesheets and help texts (importlib.resources)

The checkout's top-level core/, app/ and resources/ are links to these folders
(docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"
__all__ = ["Watch", "__version__", "watch"]

if TYPE_CHECKING:
    from memlens.core.watch.api import Watch, watch

_LAZY = {"Watch", "watch"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import memlens.core.watch.api as api

        value = api.watch if name == "watch" else api.Watch
        globals()[name] = value
        return value
    raise AttributeError(f"module 'memlens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
