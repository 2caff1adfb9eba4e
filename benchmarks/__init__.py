"""memlens benchmarks: our cost side by side with the tools users would pick instead.

`python -m benchmarks [--quick] [--json FILE] [--only GROUP,...]`; see benchmarks.__main__.
"""
