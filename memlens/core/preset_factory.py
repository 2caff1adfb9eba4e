"""Building the model a run trains: a built-in preset, or a user's model file as one."""

from __future__ import annotations

import torch

from memlens.core.config import RunConfig
from memlens.core.model_file_preset import ModelFilePreset
from memlens.core.options import is_model_file
from memlens.core.presets import PRESET_CLASSES, Preset


def build_preset(config: RunConfig, device: torch.device) -> Preset:
    torch.manual_seed(config.seed)
    if is_model_file(config.preset):
        return ModelFilePreset(config, device)
    return PRESET_CLASSES[config.preset](config, device)
