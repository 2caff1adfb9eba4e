"""Before a run allocates anything: will its model, optimizer, data and one batch fit?

The model and data are built on the meta device (shapes, no memory), one training forward
runs there with saved-tensor hooks counting what backward would keep, and the sum is set
against the memory the device has free. A run that cannot fit is refused with the estimate
instead of being killed by the OS halfway through allocating (with nothing written).
The estimate itself is core.estimate's.
"""

from __future__ import annotations

import torch

from memlens.core.estimate import MemoryEstimate, estimate_memory
from memlens.core.options import ConfigError
from memlens.core.units import format_bytes

MEMINFO = "/proc/meminfo"


def estimate_run_memory(config) -> MemoryEstimate | None:
    """A preset run's estimate, from shapes alone (nothing is allocated); None where it
    cannot be made (see memlens.core.model_file_preflight)."""
    from memlens.core.options import is_model_file
    from memlens.core.preset_factory import build_preset

    if is_model_file(config.preset):
        from memlens.core.model_file_preflight import estimate_model_file_memory

        return estimate_model_file_memory(config)
    meta = torch.device("meta")
    with meta:
        preset = build_preset(config, meta)
        return estimate_memory(preset.parameters(), preset.data_tensors(),
                               lambda: preset.forward_train(config.techniques),
                               config.optimizer)


def available_memory(device: torch.device) -> tuple[int | None, str]:
    """Bytes free for a run on `device` and where the figure comes from (None: unknown)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free), "torch.cuda.mem_get_info free"
    try:
        with open(MEMINFO, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    return None, "unknown on this system"


def check_run(config, device: torch.device) -> MemoryEstimate | None:
    """Raise ConfigError when the run cannot start here: AMP this CPU cannot run for the
    model (check_amp), or a model, optimizer and batch that do not fit (check_run_fits)."""
    check_amp(config, device)
    return check_run_fits(config, device)


def check_amp(config, device: torch.device) -> None:
    """AMP bf16 on a CPU whose oneDNN cannot run one of the model's layers under it: the one
    line saying so and what works instead (memlens.core.cpu_support). The model is built on
    the meta device for its layers; a model file that cannot be built there is checked when
    its run builds it."""
    if config.techniques.amp != "bf16" or device.type != "cpu":
        return
    from memlens.core.cpu_support import bf16_support, layer_kinds

    models = _meta_models(config)
    kind = bf16_support().blocked(layer_kinds(models)) if models else None
    if kind is not None:
        raise ConfigError(f"amp=bf16: {bf16_support().refusal(kind)}")


def _meta_models(config) -> list:
    from memlens.core.options import is_model_file

    meta = torch.device("meta")
    if not is_model_file(config.preset):
        from memlens.core.preset_factory import build_preset

        with meta:
            return list(build_preset(config, meta).models.values())
    from memlens.core.model_file import load_model_file

    file = load_model_file(config.preset)
    try:
        with meta:
            model = file.build_model()
    except (Exception, SystemExit):  # the run's own build reports what is wrong
        return []
    return [model] if isinstance(model, torch.nn.Module) else []


def check_run_fits(config, device: torch.device) -> MemoryEstimate | None:
    """Raise ConfigError (with the estimate) when the run cannot fit in free memory, unless
    `config.force`. Returns the estimate."""
    estimate = estimate_run_memory(config)
    if estimate is None:  # a model file whose code cannot run on the meta device
        return None
    free, source = available_memory(device)
    if free is not None and estimate.total > free and not config.force:
        raise ConfigError(
            f"the run needs {estimate.text()} on {device.type}, but {format_bytes(free)} is "
            f"available ({source}). Lower width, batch_size or seq_len, or pass "
            "--set force=true to start anyway."
        )
    return estimate


def is_out_of_memory(exc: BaseException) -> bool:
    """An allocation failure: Python's MemoryError, torch's OutOfMemoryError (CUDA) or the
    CPU allocator's RuntimeError."""
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text
                                              or "out of memory" in text.lower())


def setup_out_of_memory(exc: BaseException, config) -> ConfigError:
    """The message for a run whose model or data did not fit while being built."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return ConfigError(
        f"out of memory while building the {config.preset} model and its data ({first}). "
        "Lower width, batch_size or seq_len."
    )
