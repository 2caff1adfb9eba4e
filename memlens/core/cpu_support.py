"""What this CPU can do under bf16 autocast: found once per process, by trying it.

oneDNN runs torch's CPU bf16 kernels. Where the CPU has no AVX512-BF16 or AMX (most AMD
Zen 2/3 and many Intel desktops: AVX2 only), some work emulated (slowly) and some cannot run
at all: an LSTM under `torch.autocast("cpu", torch.bfloat16)` fails in oneDNN with "could not
create a primitive descriptor". memlens asks before a step needs it: a tiny forward and
backward of each layer kind under autocast, in this process, so the answer is this
machine's and this torch's (ONEDNN_MAX_CPU_ISA caps oneDNN as a smaller CPU would be).

`MEMLENS_CPU_BF16_FAIL=lstm,gru` makes the probe report those kinds as failing without
trying them: a CPU without them, simulated for tests on a machine that has them.
"""

from __future__ import annotations

import functools
import os
import platform
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

SIMULATE_ENV = "MEMLENS_CPU_BF16_FAIL"
# oneDNN's ISA levels from which it has native bf16 instructions (ONEDNN_MAX_CPU_ISA names)
_NATIVE_ISAS = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
                "AVX512_CORE_AMX_FP16", "AVX10_1_512", "AVX10_1_512_AMX",
                "AVX10_1_512_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2", "ALL", "DEFAULT")
# The layer kinds memlens probes, in the words a message uses.
KIND_NAMES = {"lstm": "an LSTM", "gru": "a GRU", "rnn": "an RNN", "conv": "a convolution",
              "linear": "a linear layer", "attention": "attention"}
# A oneDNN error text that says the CPU cannot run the primitive at all.
_UNSUPPORTED_MARKERS = ("could not create a primitive descriptor",
                        "could not create a primitive")


@dataclass(frozen=True)
class Bf16Support:
    """The answer for this process: the CPU, and which layer kinds fail under bf16."""

    cpu: str  # the processor's name
    isa: str  # ATen's kernels' ISA (torch.backends.cpu.get_cpu_capability())
    native: bool  # oneDNN has native bf16 instructions here (AVX512-BF16 or AMX)
    failed: dict[str, str] = field(default_factory=dict)  # kind -> the error's first line

    def cpu_text(self) -> str:
        """'AVX2, no AVX512-BF16/AMX' or 'AVX512 with AVX512-BF16'."""
        return f"{self.isa}, " + ("with native bf16 (AVX512-BF16/AMX)" if self.native
                                  else "no AVX512-BF16/AMX")

    def blocked(self, kinds: Iterable[str]) -> str | None:
        """The first of a model's layer kinds that cannot run under bf16 here, if any."""
        return next((k for k in kinds if k in self.failed), None)

    def refusal(self, kind: str) -> str:
        """The one line saying why AMP bf16 cannot run this model here, and what works."""
        return (f"this CPU ({self.cpu_text()}) cannot run {KIND_NAMES.get(kind, kind)} under "
                "bf16 autocast in oneDNN; AMP on this model needs such a CPU or CUDA; models "
                f"without {KIND_NAMES.get(kind, kind)} run bf16 here")

    def emulated_note(self) -> str:
        """Empty where bf16 is native; else the note a bf16 figure carries."""
        if self.native:
            return ""
        return (f"this CPU ({self.cpu_text()}) has no native bf16: oneDNN emulates it, so "
                "bf16 steps are slower than fp32 here (on CUDA or a CPU with AVX512-BF16/AMX "
                "they are faster)")

    def as_dict(self) -> dict:
        return {"cpu": self.cpu, "isa": self.isa, "native_bf16": self.native,
                "bf16_fails": dict(self.failed)}


_lock = threading.Lock()


@functools.cache
def bf16_support() -> Bf16Support:
    """This CPU's bf16 autocast support, probed on first use (tens of milliseconds)."""
    import torch

    with _lock:
        simulated = {k.strip() for k in os.environ.get(SIMULATE_ENV, "").split(",") if k.strip()}
        failed = {}
        for kind, make in _probes(torch).items():
            if kind in simulated:
                failed[kind] = f"simulated by ${SIMULATE_ENV}"
                continue
            try:
                _try(torch, make)
            except RuntimeError as exc:
                failed[kind] = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        info = cpu_info()
        return Bf16Support(cpu=info["cpu"], isa=info["isa"],
                           native=info["native_bf16"] and not simulated, failed=failed)


@functools.cache
def cpu_info() -> dict:
    """The CPU as a run's environment records it: its name, the ISA torch's kernels use
    (oneDNN's cap where ONEDNN_MAX_CPU_ISA sets a lower one) and whether bf16 is native.
    Cheap: nothing is run (bf16_support() runs the probe)."""
    import torch

    isa = torch.backends.cpu.get_cpu_capability()
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if cap and cap not in ("ALL", "DEFAULT") and not isa.upper().startswith(cap):
        isa = f"{isa} (oneDNN capped at {cap})"
    return {"cpu": cpu_name(), "isa": isa, "native_bf16": _native_bf16(torch)}


def _try(torch, make) -> None:
    module, x = make()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(*x)
    out = out[0] if isinstance(out, tuple) else out
    out.float().sum().backward()


def _probes(torch) -> dict:
    nn = torch.nn

    def seq(layer):
        return lambda: (layer(8, 8), (torch.randn(3, 2, 8),))

    return {
        "lstm": seq(nn.LSTM), "gru": seq(nn.GRU), "rnn": seq(nn.RNN),
        "conv": lambda: (nn.Conv2d(3, 4, 3), (torch.randn(2, 3, 6, 6),)),
        "linear": lambda: (nn.Linear(8, 8), (torch.randn(2, 8),)),
        "attention": lambda: (nn.MultiheadAttention(8, 2),
                              (torch.randn(3, 2, 8),) * 3),
    }


def _native_bf16(torch) -> bool:
    has = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return bool(has) and (not cap or cap in _NATIVE_ISAS)


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo on Linux), else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def layer_kinds(modules: Iterable) -> list[str]:
    """The probed layer kinds among `modules` (and their children), each once, in order."""
    import torch.nn as nn

    table = ((nn.LSTM, "lstm"), (nn.GRU, "gru"), (nn.RNN, "rnn"),
             (nn.modules.conv._ConvNd, "conv"), (nn.Linear, "linear"),
             (nn.MultiheadAttention, "attention"))
    kinds: list[str] = []
    for model in modules:
        for m in model.modules():
            for cls, kind in table:
                if isinstance(m, cls) and kind not in kinds:
                    kinds.append(kind)
    return kinds


def is_unsupported_error(exc: BaseException) -> bool:
    """A oneDNN error saying this CPU cannot run a primitive (under bf16, say)."""
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(m in text for m in _UNSUPPORTED_MARKERS)
