"""Arms take turns in blocks of steps, one process: each block runs under the load the other
arm's neighbouring blocks ran under, so a machine's slow minutes fall on both arms alike.

Each arm is a plain run_training (the same code as `run`) in a thread of its own; its sink
waits for its turn at the start and after each block, outside any timed phase. The order
alternates round by round (ABBA), so neither arm always runs first after the other.
"""

from __future__ import annotations

import threading

from memlens.core.sinks import Sink


class Turns:
    """Whose block it is. Any thread may call stop(); waiting arms then run to their stop."""

    def __init__(self, arms: int) -> None:
        self._cond = threading.Condition()
        self._arms = arms
        self._round = 0
        self._pos = 0
        self._finished: set[int] = set()
        self._stopped = False
        self.order: list[int] = []  # arm of each block, in the order they ran

    @property
    def current(self) -> int:
        order = range(self._arms) if self._round % 2 == 0 else reversed(range(self._arms))
        return list(order)[self._pos]

    def wait_turn(self, arm: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or self.current == arm)

    def block_done(self, arm: int) -> None:
        with self._cond:
            self.order.append(arm)
            self._advance()

    def finish(self, arm: int) -> None:
        with self._cond:
            self._finished.add(arm)
            if self.current == arm:
                self._advance()
            self._cond.notify_all()

    def wait_all_finished(self) -> None:
        """Block until every arm has finished: an arm that finished first must not take its
        thread back to other work while another arm's blocks are still being timed."""
        with self._cond:
            self._cond.wait_for(lambda: len(self._finished) >= self._arms)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _advance(self) -> None:
        for _ in range(2 * self._arms):
            self._pos += 1
            if self._pos == self._arms:
                self._pos, self._round = 0, self._round + 1
            if self.current not in self._finished:
                break
        self._cond.notify_all()


class TurnSink(Sink):
    """A run sink that makes its arm wait for its turn: before the first step, and after
    every `block` steps until the run's last. `on_block(arm, steps_done)` is called as each
    block ends, before the turn passes (the other arms wait meanwhile)."""

    def __init__(self, turns: Turns, arm: int, block: int, steps: int, on_step=None,
                 on_block=None) -> None:
        self.turns, self.arm, self.block, self.steps = turns, arm, block, steps
        self.done = 0
        self._on_step = on_step
        self._on_block = on_block

    def on_start(self, meta: dict) -> None:
        self.turns.wait_turn(self.arm)

    def on_steps(self, rows) -> None:
        for _ in rows:
            self._step_done()

    def _step_done(self) -> None:
        self.done += 1
        if self._on_step is not None:
            self._on_step()
        if self.done % self.block == 0 and self.done < self.steps:
            if self._on_block is not None:
                self._on_block(self.arm, self.done)
            self.turns.block_done(self.arm)
            self.turns.wait_turn(self.arm)


    def on_finish(self, summary: dict) -> None:
        self.turns.finish(self.arm)
