"""memlens.core: the Qt-free engine (docs/architecture.md has the data flow and the threads).

Module map:
    options, config     every setting (one table: type, default, valid values); RunConfig
    technique_notes     what each technique does, in our words (tooltips and Help)
    presets             the built-in models with their optimizers and seeded data
    model_file*         a user's model file as a preset (the contract, the adapter, its check)
    preflight           will the run fit: an estimate before anything is allocated
    loop                run_training and TrainingSession: phases, live techniques, samples
    controls            thread-safe live controls: techniques, pause, stop, capture
    memory, amp_casts, native/   memory by category (light and precise modes; C++ helpers)
    records, sinks      plain-number records crossing threads; where they go (FanOut)
    history             the columnar history the GUI pulls from (old rows spill to disk)
    run_files, run_folder, allocations_file, atomic, run_guard   the run folder on disk
    effects, stats      toggle effects: memory exact, time as a ratio of medians with its noise
    explain             training errors and leaks in plain words, with the fix
    lessons/            the article's claims measured, off vs on, interleaved
    compare             pinned-run compare: memory by phase and category
    watch/              recording a user's own training script (memlens.watch)
    run_follow          following a run folder another process writes
    snapshot_file       reading a snapshot.pickle as plain data (no code runs)
    exports/            snapshot.pickle, trace.json, memory_timeline.json, allocations.csv
    graph/              autograd graph capture, layout and DOT/SVG/PNG export
    cli_run, cli_progress, open_target   `memlens run` and its console output
    synthetic, units    a stand-in engine for tests and benchmarks; number formatting
"""
