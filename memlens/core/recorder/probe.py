"""Measuring memory truthfully at a phase boundary: tensor bytes by category on CPU, the
allocator on CUDA.

Every figure counts storages, each once (views and aliases share one), keyed by device and
data pointer. Parameters' storages are never counted again as activations or grads.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from memlens.core.recorder.heap import process_heap_bytes, process_rss_bytes
from memlens.core.recorder.keys import CATEGORY_CODE, StorageBytes, storage_key
from memlens.core.recorder.precise import StorageTracker
from memlens.core.recorder.saved import SavedTensorTracker
from memlens.core.recorder.sharded import GRAD_HOLDER_ATTR
from memlens.core.records import (
    NO_BUCKETS,
    SAMPLE_PHASE_CODE,
    MemorySample,
    edge_totals,
)


def _codes(phases) -> list[int]:
    return sorted(SAMPLE_PHASE_CODE[p] for p in phases)


# The phases after which a sample reads gradients anew, and optimizer state: what they can
# change. `rescan` (MemoryProbe.sample, LightProbe.edge) says which a step without detail
# changed since its last sample (RESCAN_GRADS | RESCAN_OPTIMIZER).
GRADS_CHANGE = frozenset({"start", "zero_grad", "backward"})
OPT_CHANGES = frozenset({"start", "optimizer"})
RESCAN_GRADS, RESCAN_OPTIMIZER = 1, 2


class MemoryProbe:
    """Takes MemorySamples for a preset: categories by storage on CPU, allocator on CUDA.

    A sample runs four times a step on the training thread, so it re-reads only what the
    phase just finished can have changed: gradients after zero_grad and backward, optimizer
    state after the optimizer step (and there only if its tensors are not the same ones as
    last time), carried tensors always.
    """

    # mallinfo2 walks malloc's free lists (tens of microseconds in a busy heap): read the
    # process heap once a step, at the end of forward, when activations are at their height.
    # The resident memory (RSS) is read with it, never more often.
    _HEAP_PHASES = frozenset({"start", "forward"})

    def __init__(self, preset, device: torch.device, saved: SavedTensorTracker,
                 precise: StorageTracker | None = None) -> None:
        self.preset = preset
        self.device = device
        self.cuda = device.type == "cuda"
        self.saved = saved
        self.precise = precise
        self.param_list = preset.parameters()
        self.params = StorageBytes()
        for p in self.param_list:
            self.params.add(p)
        self.params.keys = frozenset(self.params.keys)
        # Buffers (BatchNorm running stats, a causal mask) are updated in place, never
        # replaced, by the presets: counted once here. One saved for backward is still a
        # buffer, not an activation.
        self.buffers = StorageBytes()
        for b in preset.buffers():
            self.buffers.add(b, self.params.keys)
        self.buffers.keys = frozenset(self.buffers.keys)
        # Sharded or data-parallel models (core.recorder.sharded): FSDP's gathered
        # parameters and DDP's buckets, each a category of its own.
        self.sharding = getattr(preset, "sharding", None)
        self.buckets = self.sharding.buckets if self.sharding is not None else NO_BUCKETS
        saved.set_params(self.params.keys | self.buffers.keys,
                         (frozenset(p.data_ptr() for p in self.param_list)
                          | frozenset(b.data_ptr() for b in preset.buffers())) - {0},
                         leaf_params=self.sharding is not None and self.sharding.kind != "ddp")
        # Storage key -> bytes of the AMP weight copies the last forward saved (set by the
        # recorder, recorder.amp_casts); counted apart from activations while alive.
        self.amp_casts: dict = {}
        self._grads = StorageBytes()
        self._grad_list: list[Tensor] | None = []
        self.grad_watch = None
        self.light = None  # LightProbe.sample as a C function, where used (use_light_probe)
        self.edge = None  # and LightProbe.edge
        self._take_rows = None
        self._opt = StorageBytes()
        self._opt_ids: list[int] = []

    @property
    def source(self) -> str:
        if self.cuda:
            return "cuda_allocator"
        return "cpu_tracked_storages" if self.precise else "cpu_tensor_bytes"

    @property
    def label(self) -> str:
        if self.cuda:
            return "CUDA allocator (memory_allocated / reserved)"
        if self.precise:
            if self.precise.backend.startswith("allocator"):
                return "CPU allocator: every allocation tracked (exact, incl. in-step peak)"
            return "CPU tensor bytes, every storage tracked (Python dispatch mode; exact peak)"
        return "CPU tensor bytes by category (exact for what it counts; peak = lower bound)"

    def grads(self) -> list[Tensor]:
        """The gradients as of the last sample after zero_grad or backward (ask right after
        it: with the native scan the list is made when first asked for)."""
        if self._grad_list is None or self.edge is not None:  # the edges keep no list
            self._grad_list = [g for p in self.param_list if (g := p.grad) is not None]
        return self._grad_list

    def use_grad_watch(self, watch) -> None:
        """Scan gradients through the native helpers' GradWatch (CPU; see memlens.core.loop)."""
        watch.set_param_keys(list(self.params.keys))
        self.grad_watch = watch

    def use_light_probe(self, light, t0: float) -> None:
        """Take a CPU light-mode sample's gradient, optimizer and carried-tensor figures
        from the native helpers' LightProbe: the same rules as below in one call (a plain C
        function: see bind_fast in core/native/fast_calls.h). The loop's phase edges then call
        `edge(code, carried[, heap[, rescan]])`, which keeps the figures until take_block().
        `t0`: the run's start on time.perf_counter (a sample's time_s counts from it)."""
        self.light = light.fast_sample()
        # t0 on the native clock: the same instant, whatever origin either clock has.
        native_t0 = t0 + (light.clock() - time.perf_counter())
        light.set_rules(_codes(GRADS_CHANGE), _codes(OPT_CHANGES),
                        _codes(self._HEAP_PHASES), self.preset, native_t0)
        if self.precise is not None:  # the allocator recorder's (Recorder.make_probe)
            light.set_precise(self.precise.recorder, *(CATEGORY_CODE[c] for c in (
                "activations", "grads", "optimizer")))
        if self.sharding is not None:
            light.set_gathered(self.sharding.gathered_refs)  # the list itself: kept up to date
            light.set_grad_holders(self.sharding.grad_holders, GRAD_HOLDER_ATTR)
        self.edge, self._take_rows = light.fast_edges()

    def take_block(self, step: int, carried: bool = False) -> tuple[tuple, list[int]] | None:
        """The rows edge() recorded since the last take (LightProbe.take's tuples: code,
        time_s, grads, optimizer, activations, other, heap, rss, gathered, tracked) as `step`'s
        block with this probe's constant figures (records.edge_samples makes them samples
        later, on the writer's thread), and each row's total as its MemorySample will say;
        None where there are none. One call a step: it runs right after the step's kernels."""
        rows = self._take_rows()
        if not rows:
            return None
        params, buffers, buckets = self.params.total, self.buffers.total, self.buckets
        return ((step, params, buffers, rows, buckets, carried),
                edge_totals(params, buffers, rows, buckets))

    def sample_inside(self, code: int, carried) -> None:
        """An edge (see use_light_probe) inside a phase, at a moment a sharded model's memory
        peaks (FSDP about to free what it gathered), named by the phase's `code`: the
        gathered storages first looked for (FSDP makes them at a block's first gather)."""
        if self.sharding is not None:
            self.sharding.refresh()
        self.edge(code, carried, 0)

    def _amp_bytes(self, live) -> int:
        """Bytes of the AMP weight copies still saved for backward."""
        if not self.amp_casts:
            return 0
        return sum(n for key, n in self.amp_casts.items() if key in live)

    def _scan_grads(self) -> StorageBytes:
        grads = StorageBytes()
        watch = self.grad_watch
        pkeys = self.params.keys
        if watch is not None:  # the native helpers' one pass over the parameters
            grads.total, keys = watch.grad_storages()
            grads.keys = set(keys)
            self._grad_list = None  # made if asked for (see grads())
        else:
            found = [g for p in self.param_list if (g := p.grad) is not None]
            for g in found:
                grads.add(g, pkeys)
            self._grad_list = found
        if self.sharding is not None:  # FSDP's full gradients, before it reduce-scatters
            for t in self.sharding.gathered_tensors():
                if (g := t.grad) is not None:
                    grads.add(g, pkeys)
            for g in self.sharding.held_grads():  # FSDP1's shards, until backward's end
                grads.add(g, pkeys)
        return grads

    def _scan_optimizer(self, grads: StorageBytes) -> StorageBytes:
        state = [t for o in self.preset.optimizers for s in o.state.values()
                 for v in s.values() for t in _tensors_of(v)]
        ids = [id(v) for v in state]
        # Optimizers update their state in place: the same tensors, the same storages. (None
        # of them shares a storage with a gradient; if one did, scan again.)
        if ids == self._opt_ids and self._opt.keys.isdisjoint(grads.keys):
            return self._opt
        opt = StorageBytes()
        pkeys = self.params.keys
        for v in state:
            opt.add(v, pkeys)
        if not opt.keys.isdisjoint(grads.keys):
            opt = StorageBytes()
            exclude = pkeys | grads.keys
            for v in state:
                opt.add(v, exclude)
            ids = []  # never reuse a scan that had to leave gradients out
        self._opt_ids = ids
        return opt

    def sample(self, step: int, phase: str, time_s: float, carried: list[Tensor] | None = None,
               heap: bool | None = None, rescan: int = 0) -> MemorySample:
        """`carried`: the preset's carried tensors, where the caller has them already.
        `heap`: read the process heap (CPU) or not; by default at the phases that read it.
        `rescan`: RESCAN_GRADS | RESCAN_OPTIMIZER, read whatever the phase (a step without
        detail: earlier phases that change them took no sample)."""
        read_heap = phase in self._HEAP_PHASES if heap is None else heap
        grads_changed = bool(rescan & RESCAN_GRADS) or phase in GRADS_CHANGE
        opt_changed = bool(rescan & RESCAN_OPTIMIZER) or phase in OPT_CHANGES
        if self.light is not None and self.precise is None:  # (precise: its edges only)
            states = [o.state for o in self.preset.optimizers] if opt_changed else None
            if self.sharding is not None:
                self.sharding.refresh()
            # heap, rss: read in C, -1 when not asked for or where the system has none
            grads, opt, act_bytes, other, heap, rss, gathered = self.light(
                grads_changed, states,
                carried if carried is not None else self.preset.carried_tensors(),
                read_heap)
            if grads_changed:
                self._grad_list = None  # made if asked for (see grads())
            amp = self._amp_bytes(self.saved.live)
            return MemorySample(step, phase, time_s, self.params.total, grads, opt,
                                act_bytes - amp, other, None, None,
                                heap if heap >= 0 else None, self.buffers.total, amp,
                                rss=rss if rss >= 0 else None, gathered=gathered,
                                buckets=self.buckets.at(grads))
        if grads_changed:
            self._grads = self._scan_grads()
        grads = self._grads
        opt_before = self._opt
        if opt_changed:
            self._opt = self._scan_optimizer(grads)
        opt = self._opt
        act_bytes, live = self.saved.measure()
        amp = self._amp_bytes(live)
        gathered = self._scan_gathered()
        buckets = self.buckets.at(grads.total)
        known = (self.params.total + grads.total + opt.total + act_bytes + self.buffers.total
                 + buckets)
        allocated = reserved = heap = rss = None
        temporaries = 0
        if carried is None:
            carried = self.preset.carried_tensors()
        if self.cuda or self.precise is not None:
            # `other` as light mode sees it (what the loop carries); the rest of what the
            # allocator or the tracker sees and no category holds: temporaries.
            other = self._other(carried, grads, opt, gathered.keys)
            if self.cuda:
                allocated = torch.cuda.memory_allocated(self.device)
                reserved = torch.cuda.memory_reserved(self.device)
                temporaries = max(0, allocated - known - gathered.total - other)
            else:  # the tracker does not follow FSDP's resizes: it forgot those storages
                whole = self._kept_whole(live, carried)
                act_bytes, known = act_bytes + whole, known + whole
                temporaries = max(0, self.precise.live_bytes - known - other)
            # Only what can have changed: parameters once, optimizer state when rescanned.
            found = {"activations": live}
            if grads_changed:
                found["grads"] = grads.keys
            if opt is not opt_before or phase == "start":
                found["optimizer"] = opt.keys
            if phase == "start":
                found["params"] = self.params.keys
            if phase == "start":
                found["buffers"] = self.buffers.keys
            self.precise.classify(found)
        else:
            other = self._other(carried, grads, opt, gathered.keys)
        if read_heap:
            rss = process_rss_bytes()
            if not self.cuda:
                heap = process_heap_bytes()
        return MemorySample(step, phase, time_s, self.params.total, grads.total, opt.total,
                            act_bytes - amp, other, allocated, reserved, heap,
                            self.buffers.total, amp, temporaries, rss, gathered.total, buckets)

    def _kept_whole(self, live, carried: list[Tensor]) -> int:
        """Precise mode: the rest of each storage saved tensors reach only part of, where the
        run made it and the loop does not carry it (a batch the step made and sliced: the
        transformer's tokens without their last): autograd alone keeps all of it. A data
        set's rest stays the loop's; light mode cannot tell the two apart."""
        parts = live.partial_storages()
        if not parts:
            return 0
        held = {storage_key(t)[0] for t in carried}
        return sum(n - c for key, c, n in parts
                   if key not in held and self.precise.tracks(key))

    def _scan_gathered(self) -> StorageBytes:
        """The storages a sharded model's gathered parameters are in now (FSDP: 0 bytes
        between uses, left out), each once (LightProbe's scan_gathered in Python)."""
        gathered = StorageBytes()
        sharding = self.sharding
        if sharding is None:
            return gathered
        if sharding.refresh() and self.precise is not None:
            self.precise.forget(sharding.gathered_tensors())
        pkeys = self.params.keys
        for t in sharding.gathered_tensors():
            gathered.add(t, pkeys)
        return gathered

    def _other(self, carried: list[Tensor], grads: StorageBytes, opt: StorageBytes,
               gathered=frozenset()) -> int:
        """Bytes of the tensors the loop carries between steps, not counted elsewhere."""
        seen: set = set()
        total = 0
        pk, gk, ok, live = self.params.keys, grads.keys, opt.keys, self.saved.live
        bk = self.buffers.keys
        for t in carried:
            key, n = storage_key(t)
            if (key in seen or key in pk or key in gk or key in ok or key in bk
                    or key in gathered):
                continue
            if key in live:
                # A storage saved tensors reach only part of (batches sliced from a data
                # set): that part is activations, the rest the loop's own.
                part = live.counted(key)
                if part is None:
                    continue
                n -= part
            seen.add(key)
            total += n
        return total


def _tensors_of(value) -> list[Tensor]:
    """The tensors of one optimizer state entry: a tensor, or the tensors in a list or tuple
    (LBFGS keeps its history as lists: old_dirs, old_stps, ro, al)."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, Tensor)]
    return []
