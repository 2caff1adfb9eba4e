"""A watch's graph captures every N steps (core.graph): begun at a step's first forward
under grad, finished from the loss passed to its backward; run.json keeps each one's
summary (nodes, saved bytes)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor


class EveryNCaptures:
    def __init__(self, every: int, begin: Callable[[], object],
                 post: Callable[[object], None], note: Callable[[str], None]) -> None:
        """`begin()`: a started GraphCapture of the models; `post(snapshot)`: the sink's
        on_graph (the writer keeps the summary, taken at once); `note(text)`: a failure."""
        if every < 0:
            raise ValueError(f"capture_every must be >= 0, got {every}")
        self.every = every
        self._begin, self._post, self._note = begin, post, note
        self._capture = None  # a GraphCapture between a step's first forward and backward
        self._captured: set[int] = set()

    def at_forward(self, step: int) -> None:
        """A forward under grad: step `step`'s capture begins here where one is due."""
        if self.every and self._capture is None and step % self.every == 0 \
                and step not in self._captured:
            self._capture = self._begin()

    @property
    def open(self) -> bool:
        return self._capture is not None

    def at_backward(self, loss: Tensor, step: int) -> None:
        capture, self._capture = self._capture, None
        if capture is None:
            return
        self._captured.add(step)
        try:
            # No DOT: run.json keeps a capture's nodes and bytes only, and torchviz's walk
            # left the captured step's loss alive (a "graph kept" alarm on correct code).
            snapshot = capture.finish(loss, step, dot=False)
        except Exception as exc:  # a capture that fails costs the picture, never the run
            self._note(f"graph capture failed: {exc}")
            return
        self._post(snapshot)

    def at_step_end(self) -> None:
        """No backward came: nothing to capture this step."""
        if self._capture is not None:
            self._capture.abort()
            self._capture = None
