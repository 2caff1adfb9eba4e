"""The run folder: one package owns its format, its writer, its reader and its claim.

    format         file names, run.json's tag and checks, CSV headers, row codecs both ways
    claim          a new folder, or a given one that holds no run; the exclusive creates
    writer         RunWriter: the run sink every producer writes through (its own thread)
    reader         load_run: a folder back into a RunHistory, damage named; rank folders
    follow         RunFollower: another process's folder, its new rows as they come
    history_files  a history's files written whole (export), or copied where they match
    allocations    allocations.npy and allocation_frames.jsonl (precise mode)
    atomic         atomic file writes
    open_target    what a path given to Open is: a run folder or a snapshot
"""
