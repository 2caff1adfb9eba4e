"""run.json's header, the same keys for every producer of a run (the lab's loop, a watched
script, a framework callback), and what a reader makes of it: whether the run's writer is
live, finished, or gone without finishing (a SIGKILLed run)."""

from __future__ import annotations

import os
import socket
import sys
import time

# Whether a run's writer still runs, as a follower, the app and the Runs dock say it.
LIVE, FINISHED, GONE = "live", "finished", "writer gone"


def run_header(source: str, *, config: dict | None = None, script: str | None = None,
               argv: list[str] | None = None, rank: int = 0, world_size: int = 1) -> dict:
    """The header every producer writes first: who writes the run (pid, host, rank in a job
    of `world_size`; under torchrun the node and the rank on it), since when, what ran
    (`source` "lab" with its `config`, or "watch" with its `script` and `argv`), and
    `finished` False until the writer's end sets it."""
    return {
        "source": source, "pid": os.getpid(), "host": socket.gethostname(),
        "rank": rank, "world_size": world_size,
        "node_rank": _env_int("GROUP_RANK"), "local_rank": _env_int("LOCAL_RANK"),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": list(argv if argv is not None else sys.argv),
        "script": script, "config": config,
        "schedule": (config or {}).get("schedule", []),
        "finished": False,
    }


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def writer_state(doc: dict) -> str:
    """FINISHED where run.json has its summary; GONE where its writer ran on this host and
    that process no longer runs (killed, or crashed before its end); else LIVE (a writer on
    another host is taken at its word)."""
    if doc.get("summary") is not None or doc.get("finished") is True:
        return FINISHED
    pid, host = doc.get("pid"), doc.get("host")
    if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and (
            host is None or host == socket.gethostname()) and not pid_alive(pid):
        return GONE
    return LIVE


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True
