"""How much an export keeps of a long run, by default."""

DEFAULT_MAX_ENTRIES = 100_000  # snapshot entries kept, as the CUDA recorder's ring buffer
DEFAULT_MAX_ROWS = 1_000_000  # timeline rows; a longer precise run is thinned, peaks kept
