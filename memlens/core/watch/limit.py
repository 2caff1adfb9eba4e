"""A watch's step limit (`Watch(stop_after=N)`, `main.py watch --stop-after N`): the
script's training ends at the end of its Nth step, the run folder complete.

The limit is an exception raised where the next step would begin (its zero_grad or its
first model call), which the script runner catches: the steps that ran, and what the script
did after the last of them (its print of that step's loss), ran exactly as they would have,
and a script of N steps or fewer runs to its end. A BaseException, so a script's own
`except Exception` does not swallow it (as KeyboardInterrupt)."""

from __future__ import annotations


class StepLimit(BaseException):
    """The watch's step limit was reached: `steps` steps ended, the next one begins."""

    def __init__(self, steps: int) -> None:
        super().__init__(f"stopped after {steps} steps (the watch's step limit)")
        self.steps = steps


def check(step_index: int, stop_after: int) -> None:
    """Raise StepLimit where `step_index` steps have ended and that is the limit (0: none)."""
    if 0 < stop_after <= step_index:
        raise StepLimit(step_index)
