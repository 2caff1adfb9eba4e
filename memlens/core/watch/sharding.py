"""A watch's hooks into FSDP, put on only when a sharded model is found
(core.recorder.sharded): a memory sample just before FSDP frees the parameters it gathered
for a block (where a sharded model's memory is at its height: between two phase edges, where
a phase's samples would never see it), and, after each gather until every one is known, a
look for the storages FSDP gathers into (FSDP2 makes each at its first use).

Like every hook of a watch (core.watch.hooks), each wrapper calls FSDP's own function with
the same arguments and returns what it returned; memlens's part never raises into it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any


def _frees(group) -> bool:
    """Whether FSDP2's FSDPParamGroup.reshard is about to free gathered parameters (in a
    forward it keeps them where reshard_after_forward is False)."""
    try:
        if not group.is_unsharded:
            return False
        return group._training_state.name != "FORWARD" or group._reshard_after_forward
    except Exception:  # FSDP's private state changed shape: take the sample anyway
        return True


def fsdp_patches(kind: str, before_free: Callable[[], None], gathered: Callable[[], None]
                 ) -> list[tuple[Any, str, Any]]:
    """(owner, name, wrapper) for each function of FSDP `kind` ("fsdp2", "fsdp1") to wrap:
    `before_free()` runs just before FSDP frees gathered parameters, `gathered()` after a
    gather (FSDP2). Neither may raise."""
    if kind == "fsdp2":
        mod = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_param_group")
        owner = getattr(mod, "FSDPParamGroup", None)
        if owner is None or "reshard" not in owner.__dict__:
            return []
        reshard = owner.__dict__["reshard"]
        wait = owner.__dict__.get("wait_for_unshard")

        @functools.wraps(reshard)
        def reshard_wrapper(group, *args, **kwargs):
            if _frees(group):
                before_free()
            return reshard(group, *args, **kwargs)

        patches = [(owner, "reshard", reshard_wrapper)]
        if wait is not None:
            @functools.wraps(wait)
            def wait_wrapper(group, *args, **kwargs):
                out = wait(group, *args, **kwargs)
                gathered()
                return out

            patches.append((owner, "wait_for_unshard", wait_wrapper))
        return patches
    if kind == "fsdp1":
        mod = sys.modules.get("torch.distributed.fsdp._runtime_utils")
        reshard = getattr(mod, "_reshard", None) if mod is not None else None
        if reshard is None:
            return []

        @functools.wraps(reshard)
        def reshard1(state, handle, free_unsharded_flat_param, *args, **kwargs):
            if free_unsharded_flat_param:
                before_free()
            return reshard(state, handle, free_unsharded_flat_param, *args, **kwargs)

        return [(mod, "_reshard", reshard1)]
    return []
