"""memlens: see what a PyTorch training loop does to memory and to the autograd graph.

As a library, `memlens.watch(...)` records your own training loop (docs/watch.md). Nothing
heavy is imported by `import memlens`: torch and the recorder load at first use.

One installed namespace over the repository's top-level folders (docs/architecture.md):

    memlens.core       core/       the Qt-free engine: config, loop, measurement, run files,
                                   graph capture, exports, watch, the headless CLI
    memlens.app        app/        the PySide6 desktop app (the only place Qt lives)
    memlens.resources  resources/  icon, stylesheets and help texts (importlib.resources)

In a wheel the folders are installed inside this package (setuptools' package-dir in
pyproject.toml). In a source checkout (`python main.py`, `./dev`, the tests, an editable
install) this package's search path also takes the checkout's root, so `memlens.core` is
`core/` itself: one copy of each module, whichever way memlens was started.
"""

from __future__ import annotations

import os as _os
from typing import Any

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "core")) and _os.path.isfile(
        _os.path.join(_root, "core", "__init__.py")):
    __path__.append(_root)

__all__ = ["Watch", "watch"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import memlens.core.watch as core_watch

        return getattr(core_watch, name)
    raise AttributeError(f"module 'memlens' has no attribute {name!r}")
