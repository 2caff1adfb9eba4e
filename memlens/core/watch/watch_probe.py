"""The memory probe of a watch: made over what the watch has found (models, optimizers,
carried inputs), made again when it finds more, on the device the models train on; and
AMP's weight copies told apart from activations once autocast runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from memlens.core.recorder.amp_casts import amp_cast_storages_of_nodes


class WatchProbe:
    def __init__(self, rec, seen, steps, on_new: Callable[[object], None]) -> None:
        """`rec`: the recorder; `seen`: the watch's Discovery; `steps`: its StepRecorder;
        `on_new(probe)`: a new probe is in use (its header and FSDP's hooks follow it)."""
        self._rec, self._seen, self._steps, self._on_new = rec, seen, steps, on_new
        self.probe = None
        self.device = torch.device("cpu")
        self._key: tuple = ()
        self._amp_seen = False

    def ensure(self, step: int) -> None:
        """A probe over everything found so far (a new one where more was found)."""
        seen = self._seen
        seen.probe_stale = False
        with contextlib.suppress(Exception):  # an odd object in the script's variables
            seen.scan_variables()
        found = seen.found  # grow only
        key = (len(found.models), len(found.optimizers_refs), len(found.candidates),
               len(found.wrappers))
        if key == self._key and self.probe is not None:
            return
        self._key = key
        params = found.parameters()
        if params:
            self.device = params[0].device
            self._rec.set_device(self.device)
        # On CPU without precise mode a phase edge's sample is LightProbe.edge, kept in C
        # until the step's end: Python's made a MemorySample and rescanned every gradient.
        self.probe = self._rec.make_probe(found, light=not self._amp_seen)
        self._steps.use_probe(self.probe)  # the old probe's figures first
        # A new probe knows no gradients or optimizer state yet: "start" scans them all.
        self.probe.sample(step, "start", 0.0, [])
        self._on_new(self.probe)

    def note_amp_casts(self, nodes: list) -> None:
        """Autocast's weight copies this forward saved: amp_casts, not activations (as for
        the lab: recorder.amp_casts); the probe counts those still saved at each sample."""
        if not self._amp_seen:  # the native edges do not take AMP copies apart
            self._amp_seen = True
            self._steps.use_python_samples(True)
        self._rec.note_amp_casts(amp_cast_storages_of_nodes(nodes, self.probe.param_list))

    def rebuilt_sharding(self) -> dict | None:
        """At a step's end: run.json's `sharding` anew where it changed since (DDP rebuilt
        its buckets: core.recorder.sharded.Sharding.buckets_rebuilt), else None."""
        sharding = self.probe.sharding if self.probe is not None else None
        return sharding.facts() if sharding is not None and sharding.buckets_rebuilt() else None
