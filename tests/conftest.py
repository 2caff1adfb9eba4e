"""The whole suite: a watch measures what is saved for backward at every step
(MEMLENS_WATCH_DETAIL=every, `--detail every`), so a test's exact figures hold at every step
whatever its steps cost; tests/core/test_watch_detail.py checks the default schedule, and
the zoo runs the watch with its default (tests/zoo/test_zoo.py takes the variable out)."""

import os

os.environ.setdefault("MEMLENS_WATCH_DETAIL", "every")
