"""What the example scripts share beside their training: the loop that times each step
(wall and thread CPU ms) and writes those times where --times asks (the benchmarks read
them).

The scripts import it from their own folder, which Python puts on sys.path for
`python examples/x.py`, as `main.py watch` and `main.py fix` do: copy it beside a script you
copy.
"""

import time


def timed_steps(train_step, steps, times_file, say, every=50, sync=None):
    """Call train_step(step) for step 0 to steps - 1, each timed up to `sync()` where given
    (a GPU's queued work); `say(step, what train_step returned)` at every `every`-th step
    and the last. With `times_file`, write each step's wall and thread CPU ms there, one
    step a line."""
    times = []
    for step in range(steps):
        t0, c0 = time.perf_counter(), time.thread_time()
        result = train_step(step)
        if sync is not None:
            sync()
        times.append(((time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3))
        if step % every == 0 or step == steps - 1:
            say(step, result)
    if times_file:
        with open(times_file, "w") as fh:
            fh.write("\n".join(f"{t:.4f} {c:.4f}" for t, c in times) + "\n")
