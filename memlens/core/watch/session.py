"""A watch's session: the one recorder (core.recorder.StepRecorder) driven by a user's own
training loop, live, from its calls. `memlens.Watch` (core.watch.api) is its public face;
this engine's methods are what torch's hooks (core.watch.hooks), the framework callbacks
(memlens.integrations) and `main.py watch` call.

Phases come from the program: `zero_grad` (Optimizer/Module.zero_grad), `forward` (a root
module's call), `backward` (from the call of Tensor.backward / torch.autograd.backward),
`optimizer` (step hooks), user-labelled phases (`Watch.phase`), a checkpointed block's
`recompute` during backward, and the rest as `other`. A step ends at an optimizer step once
every live optimizer has stepped (so a GAN's D and G make one step), at the first forward or
zero_grad after a backward when no optimizer exists, or at `Watch.step()` once the user
calls it. What is measured, and how, is the recorder's (core.recorder), as for the lab.

Nothing here holds a user's tensor or graph (see core.watch.calls and core.watch.found).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from memlens.core.history import RunHistory
from memlens.core.recorder.recorder import GRAPH_NODE_LIMIT, Recorder
from memlens.core.recorder.step import HEAP_EVERY_S, StepRecorder
from memlens.core.records import RunEvent, RunSummary
from memlens.core.runfolder.writer import RunWriter
from memlens.core.sinks import FanOut, GuardedSink
from memlens.core.watch import diagnoses as dx
from memlens.core.watch.active import ACTIVE
from memlens.core.watch.calls import Call, CallBook, output_nodes, tensors_of
from memlens.core.watch.captures import EveryNCaptures
from memlens.core.watch.detail import DetailPolicy, WatchDetail
from memlens.core.watch.events import Events
from memlens.core.watch.found import Discovery, ModelInfo, statistics_pass
from memlens.core.watch.framework import FrameworkCalls
from memlens.core.watch.growth import GraphGrowth
from memlens.core.watch.hooks import TorchHooks
from memlens.core.watch.interventions import Interventions
from memlens.core.watch.limit import check as check_step_limit
from memlens.core.watch.meta import (
    NOTHING_FOUND_HELP,
    error_text,
    header,
    launcher_rank,
    run_folder,
    summary,
)
from memlens.core.watch.module_cache import ModuleCaches
from memlens.core.watch.norms import GradNorms
from memlens.core.watch.optimizer_calls import OptimizerCalls
from memlens.core.watch.report import print_summary
from memlens.core.watch.roots import StepLosses, trains
from memlens.core.watch.toggles import parse_changes
from memlens.core.watch.watch_probe import WatchProbe

# A step's rows are handed to the writer at most this long after the step ends, a batch at
# a time (a follower draws at 30 Hz anyway).
FLUSH_S = 0.1
RECOMPUTE = "recompute"  # a checkpointed block run again during backward
_compiling = torch.compiler.is_compiling  # a constant True while torch.compile traces


def _run_sink(folder: Path, precise: bool, history: RunHistory | None, fail):
    """The run writer (on its own thread) and the sink the watch writes to. A write that
    fails there stops the recording (`fail`), never the script. Where toggles may come
    (core.watch.interventions), their effects are measured from the run's `history`, as the
    lab's are; a watch without them keeps none."""
    writer = RunWriter(folder, precise=precise, history=history)
    sink = GuardedSink(FanOut(history, writer) if history is not None else writer,
                       lambda _sink, exc: fail(exc), catch=(Exception,))
    return writer, sink


class WatchSession(FrameworkCalls, OptimizerCalls):
    """A recording of the program's training into a run folder (see the module doc)."""

    def __init__(self, models=None, optimizers=None, *, out: str | Path | None = None,
                 precise: bool = False, capture_every: int = 0, script: str | None = None,
                 argv: list[str] | None = None, force: bool = False,
                 announce: bool = False, rank: tuple[int, int] | None = None,
                 model_found: Callable[[nn.Module], None] | None = None,
                 at=(), control: str | None = None, in_job: bool = False,
                 stop_after: int = 0, detail: str | int | None = None) -> None:
        """`at`, `control`: technique changes, the control channel (interventions);
        `in_job`: a rank a framework started again claims only its rank's folder;
        `stop_after`: steps, then core.watch.limit ends the script (0: never)."""
        if ACTIVE:
            raise RuntimeError("memlens.watch: a watch is already recording in this process; "
                               "close it first (one watch at a time)")
        if capture_every < 0:  # before the folder is claimed
            raise ValueError(f"capture_every must be >= 0, got {capture_every}")
        schedule = parse_changes(at)  # ConfigError (a ValueError) for a bad one
        # (rank, world size): a framework's own (Lightning's global_rank), else torchrun's
        self.rank, self.world_size = rank if rank is not None else launcher_rank()
        self.folder = run_folder(out, script, force, self.rank if self.world_size > 1 else None,
                                 in_job)
        history = RunHistory() if schedule or control else None
        self.writer, self.sink = _run_sink(self.folder, precise, history, self._fail)
        self.precise_requested, self.capture_every = precise, capture_every
        self.script, self.argv = script, list(argv if argv is not None else sys.argv)
        self.announce = announce  # say at close what was recorded (memlens.watch in code)
        self.stop_after = stop_after  # steps, then core.watch.limit ends the script (0: never)
        # Every step's detail where every storage is tracked, or toggles' effects measured
        self._detail_mode = "every" if precise or at or control else detail
        self.seen = Discovery(models, optimizers)
        self.found = self.seen.found
        self._t0 = time.perf_counter()
        # Precise mode: every storage through the Python dispatch mode, for the whole run
        # (no build inside a user's script); the clock adds no CUDA waits to their program.
        self.rec = Recorder(torch.device("cpu"), self._t0, precise=precise,
                            dispatch_precise=True, synchronize=False)
        self.saved, self.precise = self.rec.saved, self.rec.precise
        self.steps = StepRecorder(self.rec, self.sink, lambda: self.found.carried_refs,
                                  other_is_step=True, heap_every_s=HEAP_EVERY_S,
                                  flush_s=FLUSH_S, idle=True)
        self.log = Events(lambda: self.steps.step, self.steps.now, self.sink.on_event)
        self.events: list[RunEvent] = self.log.items
        self.interventions = None if history is None else Interventions(
            schedule, control, post=self.log.add, now=self.steps.now, publish=self.sink.on_start,
            flush=self.steps.flush, models=self.found.model_list)
        # the activations at a step's end: what outputs kept past it hold (core.watch.kept)
        self.book = CallBook(self.rec.native, self.log.report,
                             lambda: self.steps.last_figures[1])
        self.norms = GradNorms(self.rec.native, self.log.report)
        self.growth = GraphGrowth(self.log.report)
        self.caches = ModuleCaches(self.log.report, self.rec.native)
        self.measure = WatchProbe(self.rec, self.seen, self.steps, self._on_new_probe)
        # The training thread (the one that starts it): other threads' calls pass through.
        self._thread = threading.get_ident()
        self.closed, self.broken, self._manual_steps = False, False, False
        self.exit_code: int | None = None
        self._joined = 0  # memlens.watch() calls inside a script this watch records
        self.captures = EveryNCaptures(
            capture_every, lambda: self.rec.begin_capture(self.seen.models_by_name()),
            self.sink.on_graph, lambda t: self.log.note("info", "graph capture", t, once=True))
        self.in_forward = False  # a root module call is running (TorchHooks reads it)
        self._root: tuple | None = None
        self.backward_depth, self._stepped, self._after_backward = 0, set(), False
        self.losses = StepLosses()  # this step's backwards' losses
        self._graph_nodes = 0
        self._closure = False  # the optimizer step under way was given a closure
        self._closure_opt = None  # that optimizer, until its closure's first backward
        self._norm_taken: set[int] = set()  # optimizers whose norm grads_final took this step
        self._eval_loss = math.nan  # this step's, as a framework reported it (note_eval_loss)
        self.last_record = None  # the last step's StepRecord (a framework's logger reads it)
        # Called with each model found, at its first call (main.py watch: a framework's
        # callback joins the recording, memlens.integrations.attach); a fault costs a note.
        self.model_found = model_found
        self._listen()

    def _listen(self) -> None:
        """The run's header written, step 0 begun, torch's hooks on: recording starts."""
        self.detail = WatchDetail(DetailPolicy(self._detail_mode), self.saved.hooks(),
                                  self.steps, self.book, self.norms)
        self.steps.begin_step(0)
        self._period_t0 = self.steps.clock()  # (step 0 is detailed: not calibration's)
        self.sink.on_start(header(self))
        if self.interventions is not None:
            self.interventions.boundary(0)
        self.detail.start()
        if self.precise is not None:
            self.precise.__enter__()
        self.hooks = TorchHooks(self)
        self.hooks.install()
        ACTIVE.append(self)
        atexit.register(self._at_exit)  # a watch never closed still ends its files

    def _at_exit(self) -> None:
        self._joined = 0
        self.close()

    # --- what the user's Watch asks ------------------------------------------------------------
    @property
    def step_index(self) -> int:
        return self.steps.step

    @contextlib.contextmanager
    def phase(self, name: str):
        """Label the code inside as phase `name` (a hand-written update: "optimizer")."""
        self.steps.enter(name)
        try:
            yield
        finally:
            self.steps.leave()

    def step(self) -> None:
        """Mark a step boundary here; from now on only these calls end steps. (A step with
        nothing in it is not one: the first call right after an automatic step end, say.)"""
        self._manual_steps = True
        if self.steps.activity:
            self._end_step()

    def join(self) -> WatchSession:
        """This watch, for a `memlens.watch()` call inside the script it records: that
        call's close() leaves the recording to its owner."""
        self._joined += 1
        return self

    def close(self, error: BaseException | None = None, exit_code: int | None = None) -> None:
        """Stop recording: remove every hook, write the last step and the summary. (Called
        by a script that joined this watch, it only ends that script's use of it.)"""
        if self._joined and exit_code is None:
            self._joined -= 1
            return
        if self.closed:
            return
        self.closed = True
        self.hooks.remove()
        if self.interventions is not None:
            self._guard(self.interventions.close, error)
        self.norms.close()
        with contextlib.suppress(Exception):
            self.detail.stop()
        if self.precise is not None:
            with contextlib.suppress(Exception):
                self.precise.__exit__(None, None, None)
        if ACTIVE and ACTIVE[-1] is self:
            ACTIVE.pop()
        crashed = error is not None or exit_code not in (None, 0)
        self._guard(self._last_step, crashed)
        if self.nothing_found:
            self.log.note("info", "nothing found",
                        "memlens found no model (nn.Module call) and no optimizer in this run",
                        NOTHING_FOUND_HELP)
        if exit_code is not None:
            self.exit_code = exit_code
        if self.detail.policy.every is None:  # ended while auto measured: how far it got
            self._guard(self.sink.on_start, {"detail": self.detail.describe()})
        self._finish_files(summary(self, error))
        atexit.unregister(self._at_exit)
        if self.announce:
            print_summary(self)

    def _finish_files(self, summary: RunSummary) -> None:
        if self.writer.failed is not None and not self.broken:
            self._fail(self.writer.failed)
        self.steps.finish()  # the rows, and samples after the last step's end
        self.sink.on_finish(summary.to_dict())  # run.json's `finished` too
        try:
            self.writer.close()
        except Exception as exc:  # a write that failed at the end: said, never raised
            self._fail(exc)

    def _last_step(self, crashed: bool) -> None:
        if self._stepped or self._after_backward:  # a last step cut short; forwards alone
            # after the last update (a final sample) make none. One an error cut short
            # before its optimizers stepped is not a step: its samples are kept.
            required = self.seen.required_optimizers()
            partial = crashed and bool(required) and not required <= self._stepped
            self._end_step(closing=True, partial=partial)
        self.book.end_step()
        self.book.settle(self.steps.step, final=True)

    @property
    def write_error(self) -> BaseException | None:
        """The error that stopped the run folder's writes (a full disk), if one did."""
        return self.writer.failed

    @property
    def nothing_found(self) -> bool:
        return self.seen.nothing

    def _on_new_probe(self, probe) -> None:
        self.hooks.watch_sharding(probe.sharding)  # FSDP's reshard: core.watch.sharding
        self.sink.on_start(header(self))

    # --- listener callbacks (TorchHooks) --------------------------------------------------------
    def root_call(self, original, module: nn.Module, args: tuple, kwargs: dict) -> Any:
        """A module called outside any other's forward (TorchHooks): a model's forward, a
        checkpointed block's recompute during backward, or a loss module's call. Calls the
        original and returns (or raises) what it did. (The guards are written out: this runs
        at every root call, frames cost.)"""
        if _compiling() or threading.get_ident() != self._thread:
            # traced by torch.compile (add nothing to the user's graph), or another thread's
            # call (a background evaluation: not this training loop's phases)
            return original(module, *args, **kwargs)
        if self.backward_depth:  # inside backward: activation checkpointing recomputes
            return self._recompute(original, module, args, kwargs)
        info = self.seen.modules.get(id(module))  # (written out: every root call)
        if self.interventions is not None:  # toggles act around the call (interventions)
            original, args, kwargs = self.interventions.before_call(
                original, module, args, kwargs, info)
        self.in_forward = True
        try:
            started = False
            if info is None or info.is_model or info.ref() is not module:  # else a loss module
                try:
                    started = self._forward_pre(module, args, kwargs, info, sys._getframe(1))
                except Exception as exc:
                    self._fail(exc)
            if not started:
                return original(module, *args, **kwargs)
            output = None
            try:
                output = original(module, *args, **kwargs)
            finally:  # a forward that raises is recorded up to there (no graph: eval)
                try:
                    self._forward_post(module, output)
                except Exception as exc:
                    self._fail(exc)
            return output
        finally:
            self.in_forward = False

    def _recompute(self, original, module, args, kwargs) -> Any:
        self.in_forward = True
        self.steps.enter(RECOMPUTE)
        try:
            return original(module, *args, **kwargs)
        finally:
            self.in_forward = False
            self._guard(self.steps.leave)

    def _forward_pre(self, module: nn.Module, args: tuple, kwargs: dict,
                     info: ModelInfo | None, hook) -> bool:
        """A root call begins: True where it is a model's forward, recorded. `hook`: the
        frame of the hook that called root_call (its caller's line is the call's site)."""
        if self.broken:
            return False
        if self.model_found is not None and id(module) not in self.seen.modules:
            self._model_found(module)  # first: a callback names the model it trains
        if info is None or info.ref() is not module:  # (root_call's look-up, if it holds)
            info = self.seen.module(module)
        if not info.is_model:  # a loss module or another parameter-free callable
            return False
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        if grad and self._after_backward and not self._manual_steps and (
                not self.seen.required_optimizers()):
            self._end_step()
        if self.stop_after:  # before the next step's work
            check_step_limit(self.steps.step, self.stop_after)
        if self.seen.probe_stale:
            self.measure.ensure(self.steps.step)
        if grad:
            self.seen.note_called(module, info)
            if self.caches.pending:  # before this forward runs: what earlier steps cached
                self.caches.scan(self.seen.models_by_name(), self.steps.step)
        site = dx.site_from(hook.f_back)
        if not (self.detail.at_call(site, info.name, args) if grad else self.detail.on):
            return self._cheap_forward(grad, args, kwargs)
        call = Call(self.book, self.steps.step, info.name, site, grad,
                    info.eval_layers and module.training)
        if grad:
            self.captures.at_forward(self.steps.step)
        self.found.note_inputs(self.steps.step, args, kwargs)
        if grad and self.growth.looking:
            self.growth.note_inputs(args, kwargs, info.name, call.site)
        evaluation = not grad or (self.interventions is not None  # a known evaluation site:
                                  and self.interventions.script.evaluates(call.site))
        self.steps.enter("eval" if evaluation else "forward")  # eval before and after no_grad
        self._root = (module, call, self.saved.step_saved_bytes, self.steps.since)
        return True

    def _cheap_forward(self, grad: bool, args: tuple, kwargs: dict) -> bool:
        """A forward of a step without detail (core.watch.detail): its time and its inputs
        (what a sample counts as `other`), not its graph."""
        self.found.note_inputs(self.steps.step, args, kwargs)
        self.steps.enter("forward" if grad else "eval")
        self._root = () if grad else None
        return True

    def _model_found(self, module: nn.Module) -> None:
        try:
            self.model_found(module)
        except Exception as exc:
            self.log.note("info", "framework callback",
                          f"memlens could not attach its framework callback: "
                          f"{error_text(exc)}; the run is recorded without it", once=True)

    def _forward_post(self, module: nn.Module, output: Any) -> None:
        root, self._root = self._root, None
        if not root:  # a forward without detail (a grad one's graph followed: WatchDetail)
            if root is not None:
                self.book.follow_carried(output)
            self.steps.leave()
            return
        if root[0] is not module:
            return
        _, call, saved_before, t_start = root
        # a forward's time, moved to eval at the step's end if it is never backwarded
        call.ms = (self.steps.clock() - t_start) * 1e3 if self.steps.phase == "forward" else 0.0
        if call.grad:
            nodes = self.book.follow(call, output, self.steps.step)
            if call.grad and torch.is_autocast_enabled(self.measure.device.type):
                self.measure.note_amp_casts(nodes or output_nodes(output))
        self.book.calls.append(call)
        self.steps.leave()
        if call.grad:  # after the forward's sample: the Python tracker counts at a measure
            call.bytes = max(0, self.saved.step_saved_bytes - saved_before)
        if not call.grad and call.train_layers and not statistics_pass(module):
            self.book.eval_in_train(call)

    def zero_grad(self, original, owner, args: tuple, kwargs: dict) -> Any:
        if self.broken:  # (a stopped recording's toggles stop with it)
            return original(owner, *args, **kwargs)
        call = None
        if self.interventions is not None:  # zero_grad=...: forced or skipped
            call = self.interventions.zero_grad(original, owner, args, kwargs)
        started = self._guard(self._before_zero_grad, owner)
        try:
            return original(owner, *args, **kwargs) if call is None else call()
        finally:
            if started:
                self._guard(self.steps.leave)

    def _before_zero_grad(self, owner) -> None:
        if (self._after_backward and not self.seen.required_optimizers()
                and not self._manual_steps):
            self._end_step()
        if self.stop_after:
            check_step_limit(self.steps.step, self.stop_after)
        if isinstance(owner, torch.optim.Optimizer):
            self.seen.add_optimizer(owner, active=False)
        self.norms.cleared = True
        self.steps.enter("zero_grad")

    def backward(self, call, tensors, inputs=None, returns_grads: bool = False) -> Any:
        if self.interventions is not None:  # amp: the span closed, the loss scaled
            call = self.interventions.before_backward(call, tensors, returns_grads)
        if self.broken:
            return call()
        self.backward_depth += 1
        if self.backward_depth > 1:
            try:
                return call()
            finally:
                self.backward_depth -= 1
        # a gradient of tensors that are no parameters (a saliency map) trains nothing
        training = inputs is None or trains(inputs, self.found.parameters)
        # the loss's site is looked for from the hook's caller on (sys._getframe(1): the
        # hook), not through this method's frames; the frame is not kept
        started = self._guard(self._before_backward, tensors, training, sys._getframe(1))
        failed = False
        try:
            return call()
        except RuntimeError as exc:
            failed = True
            self._guard(self.book.explain_backward_error, exc, self.steps.step,
                        tensors_of(tensors), self.growth.carried)
            if self.interventions is not None:  # no graph where memlens ran no_grad?
                self.interventions.backward_failed(exc)
            raise
        except BaseException:
            failed = True
            self._guard(self.book.backward_failed)
            raise
        finally:
            self.backward_depth -= 1
            if started:
                self._guard(self._after_backward_call, training, not failed)

    def _before_backward(self, tensors, training: bool, hook) -> None:
        ca = sys.modules.get("torch._dynamo.compiled_autograd")
        if ca is not None and getattr(ca, "compiled_autograd_enabled", False):
            # compiled autograd runs no C++ node hooks: which forwards it reached is unknown
            self.book.uncounted = True
        if not training:
            self.steps.enter("backward")
            return
        roots = tensors_of(tensors)
        if self.captures.open and roots:  # before the loss is marked (see there)
            self.captures.at_backward(roots[0], self.steps.step)
        self._note_roots(roots, hook)
        if not self.norms.cleared:  # cleared without zero_grad (p.grad = None)?
            self.norms.check_none(self.found.optimizers)
        self.steps.enter("backward")

    def _after_backward_call(self, training: bool, returned: bool) -> None:
        self.steps.leave()
        self._after_backward = self._after_backward or training
        if self._closure and training and returned:  # the gradients a closure's step starts from
            self._closure_backward()

    def _note_roots(self, roots: list[Tensor], hook) -> None:
        where = None
        for t in roots:
            if t.grad_fn is None:
                continue
            if t.numel() == 1:  # the loss as the user's own loss.item() reads it
                self.losses.add(t)
                if self.losses.scaled:
                    self.norms.rescaled()
            where = where or dx.site_from(hook.f_back)
            self.book.mark_loss(t, self.steps.step, where)
        self._graph_nodes = self.rec.count_nodes(roots, GRAPH_NODE_LIMIT)

    # --- a fault of memlens's own stops the recording, never the user's program --------------
    def _guard(self, fn, *args) -> bool:
        if self.broken:
            return False
        try:
            fn(*args)
        except Exception as exc:
            self._fail(exc)
            return False
        return True

    def _fail(self, exc: Exception) -> None:
        self.broken = True
        with contextlib.suppress(Exception):
            self.log.note("info", "memlens stopped recording",
                        f"memlens stopped recording after an error of its own: "
                        f"{error_text(exc)}. The script runs on unchanged.")

    # --- steps -----------------------------------------------------------------------------------
    def _end_step(self, closing: bool = False, partial: bool = False) -> None:
        step = self.steps.step
        if partial:
            self.steps.abandon_step()
            self.log.note("info", "step cut short",
                          f"step {step} was cut short by the error before its optimizer step: "
                          "its samples are in memory.csv; it is not counted as a step")
            return
        book = self.book
        if self.interventions is not None:  # what the script did this step
            self.interventions.end_step(book, bool(self._stepped))
        if book.calls:  # a forward never backwarded was an eval (steps without detail have
            # no calls: their forwards are followed by handle only)
            self.steps.move_time("forward", "eval",
                                 sum(c.ms for c in book.calls if c.grad and not c.reached()))
        record = self.last_record = self.steps.end_step(
            loss=self.losses.value(), grad_norm=self.norms.norm,
            eval_loss=self._eval_loss, nodes=self._graph_nodes, stepped=bool(self._stepped))
        self.rec.prune_amp_casts()
        book.end_step()
        self.captures.at_step_end()
        book.settle(step, final=False)
        # at the program's end its last loss may well be alive: no step ends
        retained = 0 if closing else self.saved.retained_bytes
        if not closing:
            book.check_graph_kept(step, retained)
            self.growth.end_step(step, self._graph_nodes, retained, record.backward_ms)
        detailed = self.detail.on
        self.detail.end_step(self._graph_nodes, retained)
        if (sharding := self.measure.rebuilt_sharding()) is not None:  # DDP's buckets
            self.sink.on_start({"sharding": sharding})
        # auto's calibration: the step with all memlens did for it (a detail's samples
        # are no phase's time), up to here; the next step's start (its detail turned on or
        # off) is the next step's own (charged to the step before, a detailed step's start
        # was counted as a clear step's cost: core.watch.detail's module doc)
        now = self.steps.clock()
        period_ms, self._period_t0 = (now - self._period_t0) * 1e3, now
        chose = self.detail.timed(step, period_ms, detailed)
        self._next_step()
        if chose:  # run.json says what it chose
            self.sink.on_start({"detail": self.detail.describe()})

    def _next_step(self) -> None:
        if self.interventions is not None:  # changes, the channel, a pause: between steps
            self.interventions.boundary(self.steps.step + 1)
        self.steps.begin_step(self.steps.step + 1)
        self.detail.begin_step(self.steps.step)
        self._stepped = set()
        self.seen.new_step()
        self.norms.new_step()
        self.growth.new_step()
        self._after_backward = False
        self.losses.reset()
        self.caches.new_step(self.steps.step)
        self._norm_taken = set()
        self._eval_loss = math.nan
