"""Callbacks that record a framework's training with memlens (docs/frameworks.md).

    memlens.integrations.lightning.MemlensCallback     PyTorch Lightning's Trainer
    memlens.integrations.transformers.MemlensCallback  Hugging Face transformers' Trainer

Neither framework is a dependency of memlens: each module imports its framework when it is
imported itself, and says what to install where it is missing.
"""
