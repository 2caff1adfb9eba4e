"""memlens's start-up in the processes a script under `main.py watch` starts (on their
PYTHONPATH only): a rank the framework started again records itself
(memlens.integrations.relaunch); then the `sitecustomize` this one hides, if any, runs."""

import os
import sys


def _memlens_start() -> None:
    spec = os.environ.get("MEMLENS_WATCH_RELAUNCH")  # relaunch.ENV (memlens not imported yet)
    if not spec:
        return
    try:
        import json

        path = json.loads(spec).get("path")
        if path and path not in sys.path:
            sys.path.append(path)  # last: memlens's folder never hides the script's modules
        from memlens.integrations.relaunch import start_if_relaunched

        start_if_relaunched()
    except Exception as exc:  # the child runs on as it would without memlens
        print(f"memlens watch: this process is not recorded: {exc}", file=sys.stderr)


def _chain() -> None:
    """Import the sitecustomize that this one hides (later on sys.path), as Python would."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    except Exception as exc:
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{exc}",
              file=sys.stderr)
    finally:
        sys.path[:] = saved


_memlens_start()
_chain()
