"""The exit statuses every command uses, one definition."""

EXIT_OK = 0
EXIT_FAILED = 1  # the command could not do its work (a shot not saved, a graph not captured)
EXIT_BAD_INPUT = 2  # a setting, an argument, a file or a user's model that cannot be used
EXIT_TRAINING_ERROR = 3  # a run stopped on a training error
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_SIGNAL_BASE = 128  # a run stopped by signal N exits 128 + N
