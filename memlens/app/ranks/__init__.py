"""A torchrun job's ranks side by side: the Ranks tab, its plots, its table, its source."""
