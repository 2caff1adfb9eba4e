"""memlens.core: the Qt-free engine (docs/architecture.md has the data flow and the threads).

Module map:
    options, config     every setting (one table: type, default, valid values); RunConfig
    presets             the built-in models with their optimizers and seeded data
    loop                run_training and TrainingSession: phases, live techniques, samples
    controls            thread-safe live controls: techniques, pause, stop, capture
    memory, native/     measuring memory by category (light and precise modes; C++ helpers)
    records, sinks      plain-number records crossing threads; where they go (FanOut)
    history             the columnar in-memory history the GUI pulls from
    run_files, allocations_file, atomic   the run folder on disk, written as the run goes
    stats               time effects with their noise (ratio of medians, bootstrap interval)
    explain             training errors and leaks in plain words, with the fix
    exports/            snapshot.pickle, trace.json, memory_timeline.json, allocations.csv
    graph/              autograd graph capture, layout and DOT/SVG/PNG export
    cli_run             `memlens run`, the lab headless
    synthetic, units    a stand-in engine for tests and benchmarks; number formatting
"""
