"""CUDA paths (skipped without a GPU). On a lent GPU: `pytest tests/core/test_cuda.py`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.core.helpers import run, samples_at, steps_col

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


@pytest.mark.parametrize("preset", ["mlp", "cnn", "lstm", "gan", "transformer"])
def test_cuda_run_reports_allocator_figures(preset):
    history, summary = run(preset, steps=4, device="cuda", eval_every=2)
    assert summary.stopped_by == "completed"
    alloc = steps_col(history, "allocated_bytes")
    peak = steps_col(history, "peak_bytes")
    reserved = steps_col(history, "reserved_bytes")
    assert np.all(alloc > 0) and np.all(peak >= alloc) and np.all(reserved >= alloc)
    # Categories never exceed what the allocator has handed out.
    rows = history.samples.rows()
    idx = history.samples.index
    cats = rows[:, [idx[c] for c in ("params", "grads", "optimizer", "activations")]].sum(1)
    assert np.all(cats <= rows[:, idx["allocated"]])
    assert np.all(rows[:, idx["total"]] == rows[:, idx["allocated"]])
    assert history.meta["environment"]["memory_source"] == "cuda_allocator"


def test_cuda_set_to_none_frees_grads_at_the_allocator():
    h_none, _ = run("mlp", steps=4, device="cuda", zero_grad="set_to_none")
    h_zero, _ = run("mlp", steps=4, device="cuda", zero_grad="zeros")
    a_none = samples_at(h_none, "zero_grad", "allocated")[1:]
    a_zero = samples_at(h_zero, "zero_grad", "allocated")[1:]
    params = samples_at(h_none, "start", "params")[0]
    np.testing.assert_allclose(a_zero - a_none, params, rtol=0.02)


def test_cuda_fp16_with_grad_scaler_and_bf16_run():
    for amp in ("fp16", "bf16"):
        _, summary = run("cnn", steps=4, device="cuda", amp=amp)
        assert summary.stopped_by == "completed", summary.error


def test_cuda_precise_peak_is_exact_and_bounded_by_the_allocator_peak():
    history, _ = run("mlp", steps=3, device="cuda", precise=True)
    assert np.all(steps_col(history, "peak_bytes") >= steps_col(history, "allocated_bytes"))


def test_a_gpu_value_read_at_the_steps_end_is_the_one_it_had():
    """core/watch/device_reads.py on a GPU: pinned copies made as the GPU gets to them, read
    later, equal what .item() read at once, even after the tensors change on the stream."""
    from memlens.core.recorder.recorder import device_sum_of_squares, sum_of_squares
    from memlens.core.watch.device_reads import DeviceRead

    loss = torch.randn(64, device="cuda").pow(2).mean()
    scale = torch.full((), 2.0**16, device="cuda")
    want = [loss.item(), scale.item()]
    read = DeviceRead([loss, scale])
    loss.add_(1.0)  # queued after the copy: the read keeps the value it was given
    assert read.values() == want
    grads = [torch.randn(300, 7, device="cuda"), torch.randn(5, device="cuda")]
    norm = DeviceRead([device_sum_of_squares(grads)])
    assert norm.values()[0] == pytest.approx(sum_of_squares(grads), rel=1e-6)
    cpu = sum(float((g.double() ** 2).sum()) for g in grads)  # counted here
    assert norm.values()[0] == pytest.approx(cpu, rel=1e-5)
