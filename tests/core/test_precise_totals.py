"""Precise mode claims every allocation: its total at every sample is every storage alive,
those made before the run included (issue #47 point 6), checked against a count made here: a
plain TorchDispatchMode that sees every op's output from before the preset is built, and a
weak reference that sees each storage go."""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.loop import run_training
from tests.core.helpers import tiny_config


class LiveStorages(TorchDispatchMode):
    """The bytes of every storage an op made while the mode was on and that is alive now."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[weakref.ref, int]] = {}
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._add(t.untyped_storage())
        return out

    def _add(self, storage) -> None:
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in self.live:
            return
        n = storage.nbytes()

        def gone(ref, ptr=ptr, n=n) -> None:
            if self.live.get(ptr, (None,))[0] is ref:
                del self.live[ptr]
                self.bytes -= n

        self.live[ptr] = (weakref.ref(storage, gone), n)
        self.bytes += n


class _Totals(RunHistory):
    """A run's history that notes, as each sample is taken, what the count above says: a
    Python sample (MemoryProbe.sample) and a native phase edge alike (short steps take
    theirs on the LightProbe's edge, made samples at the step's end), each in the order
    taken; `pairs` matches them with the samples the history holds, in the same order."""

    def __init__(self, count: LiveStorages, monkeypatch) -> None:
        super().__init__()
        self.count = count
        self.counted: list[int] = []
        self.edges = 0
        from memlens.core.recorder.probe import MemoryProbe

        original, use_light = MemoryProbe.sample, MemoryProbe.use_light_probe

        def sample(probe, *args, **kwargs):
            s = original(probe, *args, **kwargs)
            self.counted.append(self.count.bytes)
            return s

        def use_light_probe(probe, *args, **kwargs):
            use_light(probe, *args, **kwargs)
            edge = probe.edge

            def noted(*a):
                edge(*a)
                self.counted.append(self.count.bytes)
                self.edges += 1

            probe.edge = noted

        monkeypatch.setattr(MemoryProbe, "sample", sample)
        monkeypatch.setattr(MemoryProbe, "use_light_probe", use_light_probe)

    @property
    def pairs(self) -> list[tuple[int, str, int, int]]:
        from memlens.core.records import SAMPLE_PHASES

        rows, idx = self.samples.rows(), self.samples.index
        assert len(rows) == len(self.counted)  # every sample noted, none twice
        out = []
        for row, counted in zip(rows, self.counted, strict=True):
            phase = SAMPLE_PHASES[int(row[idx["phase"]])]
            out.append((int(row[idx["step"]]), phase, int(row[idx["total"]]), counted))
        return out


@pytest.mark.parametrize("preset", ["mlp", "cnn", "lstm", "transformer"])
def test_precise_totals_count_every_storage_alive_made_before_the_run_too(preset, monkeypatch):
    cfg = tiny_config(preset, steps=3, precise=True, eval_every=1)
    count = LiveStorages()
    history = _Totals(count, monkeypatch)
    with count:  # on before run_training builds the preset: its data, its templates
        run_training(cfg, RunControls(cfg.techniques), history)
    assert len(history.pairs) == 1 + 3 * 6
    wrong = [(step, phase, total - counted) for step, phase, total, counted in history.pairs
             if total != counted]
    assert not wrong


def _plain_gan_totals(steps: int) -> list[tuple[int, str, int]]:
    """A plain GAN loop on the preset's models and data (D on real and detached fake, G
    through D), counted by LiveStorages at the boundaries memlens samples: it holds d_loss,
    g_loss and fake between steps, and reports d_loss.item() + g_loss.item()."""
    import torch.nn.functional as F

    from memlens.core.preset_factory import build_preset

    count, out = LiveStorages(), []
    with count:
        p = build_preset(tiny_config("gan"), torch.device("cpu"))
        G, D = p.models["G"], p.models["D"]
        out.append((0, "start", count.bytes))
        held = None
        for step in range(steps):
            for opt in p.optimizers:
                opt.zero_grad(set_to_none=True)
            out.append((step, "zero_grad", count.bytes))
            fake = G(p.z[step].clone())
            real_logit, fake_logit = D(p.real[step].clone()), D(fake.detach())
            ones, zeros = torch.ones_like(real_logit), torch.zeros_like(real_logit)
            d_loss = (F.binary_cross_entropy_with_logits(real_logit, ones)
                      + F.binary_cross_entropy_with_logits(fake_logit, zeros))
            g_loss = F.binary_cross_entropy_with_logits(D(fake), ones)
            del real_logit, fake_logit, ones, zeros
            held = (d_loss, g_loss, fake)  # the last step's go only now
            del d_loss, g_loss, fake
            out.append((step, "forward", count.bytes))
            held[0].backward()
            held[1].backward(inputs=list(G.parameters()))
            out.append((step, "backward", count.bytes))
            for opt in p.optimizers:
                opt.step()
            out.append((step, "optimizer", count.bytes))
    return out


def test_gan_holds_what_a_plain_gan_loop_holds_no_summed_loss_too(monkeypatch):
    """The preset reported d_loss + g_loss as a tensor with its own graph node: 4 bytes and
    a node a plain loop (d_loss.item() + g_loss.item()) never makes."""
    cfg = tiny_config("gan", steps=3, precise=True, eval_every=0)
    history = _Totals(LiveStorages(), monkeypatch)
    run_training(cfg, RunControls(cfg.techniques), history)
    memlens = {(step, phase): total for step, phase, total, _ in history.pairs}
    plain = _plain_gan_totals(3)
    assert [(s, ph, memlens[(s, ph)] - n) for s, ph, n in plain if memlens[(s, ph)] != n] == []


def test_gan_graph_nodes_agree_with_the_graph_view_and_a_plain_walk():
    from tests.core.helpers import run

    history, _ = run("gan", steps=2, capture_every=1)
    from memlens.core.config import TechniqueToggles
    from memlens.core.preset_factory import build_preset

    p = build_preset(tiny_config("gan"), torch.device("cpu"))
    result = p.forward_train(TechniqueToggles())
    seen, todo = set(), [loss.grad_fn for loss, _ in result.backward]
    while todo:  # every node backward reaches from the two losses, each once
        fn = todo.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            todo.extend(f for f, _ in fn.next_functions)
    assert list(history.steps.column("graph_nodes")) == [len(seen)] * 2
    assert [g.count("op") for g in history.graphs] == [len(seen)] * 2


@pytest.mark.parametrize("helpers", ["native", "python"])
def test_a_batch_the_step_made_and_slices_counts_whole_as_saved_in_precise_mode(
        helpers, monkeypatch):
    """The transformer saves chunk[:, :-1] of a batch the step cloned: the storage's last
    token is reached by no saved tensor, but nothing else holds it: autograd keeps all of
    it. (Slices of the data set the loop holds count only what they reach.)"""
    from memlens.core.config import TechniqueToggles
    from memlens.core.preset_factory import build_preset
    from tests.core.helpers import run, samples_at
    from tests.core.test_article_lessons import _python_helpers

    if helpers == "python":  # the dispatch mode and the Python saved-tensor tracker
        _python_helpers(monkeypatch)
    history, _ = run("transformer", steps=2, precise=True)
    p = build_preset(tiny_config("transformer"), torch.device("cpu"))
    skip = {t.untyped_storage().data_ptr() for t in (*p.parameters(), *p.buffers())}
    data = p.chunks.untyped_storage().data_ptr()
    whole, reached = {}, set()

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr == data:  # the data set's: the bytes this view reaches
            size = t.element_size()
            offsets = torch.arange(st.nbytes() // size).as_strided(
                t.shape, t.stride(), t.storage_offset())
            reached.update(range(int(offsets.min()) * size, (int(offsets.max()) + 1) * size))
        elif ptr and ptr not in skip:
            whole[ptr] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = p.forward_train(TechniqueToggles())
    assert list(samples_at(history, "forward", "activations")) == [
        sum(whole.values()) + len(reached)] * 2
    # what is left beside them: the logits and the loss the loop keeps bound (the allocator
    # recorder's figure: the dispatch mode sees op outputs only, and misses 112 B that
    # step 0 leaves behind here)
    held = sum(t.untyped_storage().nbytes() for t in (result.report_loss, *result.outputs))
    if helpers == "native":
        assert list(samples_at(history, "forward", "temporaries")) == [held] * 2


@pytest.mark.parametrize("preset", ["mlp", "cnn", "lstm", "transformer", "gan"])
def test_precise_samples_on_the_native_edge_are_the_python_samples(preset, monkeypatch):
    """Short steps take precise mode's samples on the LightProbe's edge (C: the storages
    filed under their categories in the allocator recorder, its live bytes in the row);
    the same run with every sample taken by MemoryProbe.sample must give the same figures,
    category by category, at every phase of every step."""
    import memlens.core.recorder.step as step_module
    from memlens.core.recorder.probe import MemoryProbe

    def figures(history) -> list[tuple]:
        rows, idx = history.samples.rows(), history.samples.index
        skip = {"x", "time_s", "heap", "rss"}  # when, and the process's own figures
        return [tuple((c, r[idx[c]]) for c in idx if c not in skip) for r in rows]

    # every step short, however loaded the machine (a tiny transformer's precise steps
    # took over SHORT_STEP_MS beside two busy loops, and no sample went on the edge)
    monkeypatch.setattr(step_module, "SHORT_STEP_MS", 1e9)
    monkeypatch.setattr(step_module, "LONG_STEP_MS", 2e9)
    cfg = tiny_config(preset, steps=4, precise=True, eval_every=2)
    edges = _Totals(LiveStorages(), monkeypatch)
    run_training(cfg, RunControls(cfg.techniques), edges)
    assert edges.edges >= 4  # a short step (after the first) samples on the edge
    monkeypatch.setattr(MemoryProbe, "use_light_probe", lambda *a, **k: None)
    python = RunHistory()
    run_training(cfg, RunControls(cfg.techniques), python)
    # (NaN where a figure is not taken: allocated, reserved on CPU; the same in both)
    assert [[(c, v) for c, v in row if v == v] for row in figures(edges)] == [
        [(c, v) for c, v in row if v == v] for row in figures(python)]

    def filed(history) -> list[tuple]:  # each alloc and free: its bytes, category, when
        rows, idx = history.allocs.rows(), history.allocs.index
        return [tuple(int(r[idx[c]]) for c in ("action", "bytes", "category", "step", "phase"))
                for r in rows]

    assert filed(edges) == filed(python)


def test_short_steps_hand_their_allocation_rows_on_a_block_at_a_time_and_all_of_them(
        monkeypatch):
    """Precise mode's alloc/free rows go to the sink once ALLOC_FLUSH_S old (on the phase
    clock, faked here at 1 ms a read: steps of a few ms), not each step: fewer hand-offs than
    steps, yet at the run's end every step's rows are there, each once."""
    import memlens.core.recorder.recorder as recorder_module
    from memlens.core.recorder.step import ALLOC_FLUSH_S

    ticks = iter(range(10**9))
    monkeypatch.setattr(recorder_module, "phase_clock",
                        lambda device, synchronize=True: (lambda: next(ticks) * 1e-3, "fake"))

    class Counted(RunHistory):
        def __init__(self) -> None:
            super().__init__()
            self.handed: list[tuple[int, int]] = []  # (steps handed on so far, rows)

        def on_allocations(self, rows) -> None:
            self.handed.append((len(self.steps), len(rows.table)))
            super().on_allocations(rows)

    cfg = tiny_config("mlp", steps=40, precise=True)
    history = Counted()
    run_training(cfg, RunControls(cfg.techniques), history)
    steps_per_hand_off = ALLOC_FLUSH_S / 0.02  # (a step reads the clock under 20 times)
    assert 1 < len(history.handed) < 40 / steps_per_hand_off + 2
    # every row the recorder saw, each once: a plain count of the steps' allocations
    rows, idx = history.allocs.rows(), history.allocs.index
    assert len(rows) == sum(n for _, n in history.handed)
    assert set(rows[:, idx["step"]].astype(int).tolist()) == set(range(40))
    ids = rows[:, idx["storage"]][rows[:, idx["action"]] == 0]
    assert len(set(ids.tolist())) == len(ids)  # each allocation once


def test_a_paused_run_has_handed_on_every_allocation_it_made(monkeypatch):
    """Paused (the app's pause button), the allocation rows still waiting for their block
    go to the sink: the timeline the user looks at has every step measured so far."""
    import threading

    import memlens.core.recorder.recorder as recorder_module

    ticks = iter(range(10**9))  # 1 ms a clock read: rows wait for ALLOC_FLUSH_S
    monkeypatch.setattr(recorder_module, "phase_clock",
                        lambda device, synchronize=True: (lambda: next(ticks) * 1e-3, "fake"))
    cfg = tiny_config("mlp", steps=12, precise=True)
    controls = RunControls(cfg.techniques)
    while_paused = threading.Event()

    class PauseAfterFive(RunHistory):
        def on_steps(self, rows) -> None:
            super().on_steps(rows)
            if len(self.steps) == 5:
                controls.pause()

        def on_allocations(self, rows) -> None:
            super().on_allocations(rows)
            if controls.paused:
                self.steps_then = len(self.steps)
                self.last_step = int(self.allocs.rows()[-1, self.allocs.index["step"]])
                while_paused.set()

    history = PauseAfterFive()
    resumer = threading.Thread(target=lambda: (while_paused.wait(60), controls.resume()))
    resumer.start()
    run_training(cfg, controls, history)
    resumer.join()
    assert while_paused.is_set()  # handed on while paused, not at the resume
    assert (history.steps_then, history.last_step) == (5, 4)
