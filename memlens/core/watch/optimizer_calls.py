"""What an optimizer tells a watch (torch's global optimizer step hooks, and the wrapped
`Optimizer.__init__`): optimizers found as they are made, a step's grad norm and its end
where every optimizer it waits for has stepped.

A part of `WatchSession` (its base class), kept apart as FrameworkCalls is; it uses the
session's state (`seen`, `norms`, `losses`, `steps`, `_guard`, the step's bookkeeping).
"""

from __future__ import annotations

from memlens.core.watch.meta import optimizer_site


class OptimizerCalls:
    def optimizer_created(self, opt) -> None:
        self._guard(self.seen.add_optimizer, opt, False)

    def optimizer_pre(self, opt, args, kwargs) -> None:
        self._guard(self._optimizer_pre, opt, args, kwargs)

    def optimizer_post(self, opt, _args=None, _kwargs=None) -> None:
        self._guard(self._optimizer_post, opt)

    def _optimizer_pre(self, opt, args, kwargs) -> None:
        seen = self.seen
        known = seen.known_active(opt)  # (the usual case: no wrapper, measured already)
        if not known and seen.is_wrapper(opt):  # accelerate's: the one it wraps steps, or not
            return
        if self.interventions is not None:  # amp: the span closed, the gradients unscaled
            self.interventions.before_step(opt)
        if not known:
            seen.add_optimizer(opt, active=True)
        if self.seen.probe_stale:
            self.measure.ensure(self.steps.step)
        if not self._manual_steps and id(opt) in self._stepped:
            self._end_step()  # it steps again: the step before ended without the others
        closure = args[1] if len(args) > 1 else kwargs.get("closure")  # args[0]: the optimizer
        self._closure = closure is not None
        if self._closure:
            self.losses.closure_begins()
            self._closure_opt = opt  # its norm: at its closure's first backward's end
        if not self._closure and id(opt) not in self._norm_taken:
            # else at its closure's first backward's end, inside the step (_closure_backward)
            self.norms.measure(opt, optimizer_site)
        self.steps.enter("optimizer")

    def _optimizer_post(self, opt) -> None:
        if not self.seen.known_active(opt) and self.seen.is_wrapper(opt):
            return
        self.steps.leave()
        if self._closure:
            self.losses.closure_ends()
            self._closure_opt = None
        if self._closure and id(opt) not in self._norm_taken:  # a closure without a backward
            self.norms.measure(opt, optimizer_site)
        self._stepped.add(id(opt))
        self.norms.cleared = False  # clearing is asked for again before the next step
        self.seen.ever_stepped.add(id(opt))
        if not self._manual_steps and self.seen.required_optimizers() <= self._stepped:
            self._end_step()

    def _closure_backward(self) -> None:
        """A training backward inside an optimizer's closure ended: the gradients the step
        starts from, whose norm goes with the loss it counts (the first evaluation: LBFGS
        evaluates its closure again at each point of its line search)."""
        opt = self._closure_opt
        if opt is not None and id(opt) not in self._norm_taken:
            self._norm_taken.add(id(opt))
            self.norms.measure(opt, optimizer_site)
