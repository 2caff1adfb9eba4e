"""Remake the README's screenshots of the main window: one table of what each picture shows,
each made by the app itself (`main.py shot`, offscreen) at the size the README shows.

    python tools/readme_shots.py              # all of them, into docs/
    python tools/readme_shots.py app-dark     # only those whose name contains "app-dark"

Pictures made elsewhere are not here: the Lessons tab's (tests/app/test_lessons_tab.py's
figures), the watch's follow pictures (tools/shot_follow.py) and the ranks view.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZE = "1280x800"  # the smallest laptop screen the app is made for

# docs/<name>.png -> the shot's arguments (README's alt text says what each shows)
SHOTS: dict[str, list[str]] = {
    "app-mlp-zero-grad-off": ["--preset", "mlp", "--steps", "80", "--at", "40:zero_grad=off"],
    "app-dark": ["--preset", "mlp", "--steps", "80", "--at", "40:zero_grad=off",
                 "--theme", "dark"],
    "app-lstm-detach-off": ["--preset", "lstm", "--steps", "40",
                            "--at", "20:detach_state=false"],
    "app-lstm-detach-on": ["--preset", "lstm", "--steps", "40",
                           "--at", "20:detach_state=false", "21:detach_state=true",
                           "--resume"],
    "app-compare-leak": ["--preset", "mlp", "--steps", "60",
                         "--set", "eval_every=5", "leak_loss_sum=true", "no_grad_eval=false",
                         "--baseline", "leak_loss_sum=false", "no_grad_eval=true"],
    "app-mlp-precise": ["--preset", "mlp", "--steps", "40", "--set", "precise=true"],
    "app-mlp-eval-under-grad": ["--preset", "mlp", "--steps", "80", "--set", "eval_every=5",
                                "--at", "40:no_grad_eval=false"],
    "graph": ["--preset", "cnn", "--steps", "6", "--set", "amp=bf16", "--tab", "graph"],
    "app-model-file-cnn": ["--preset", str(ROOT / "examples" / "cnn_classifier.py"),
                           "--steps", "40", "--set", "eval_every=2",
                           "--at", "20:no_grad_eval=false"],
}


def main(argv: list[str]) -> int:
    wanted = [n for n in SHOTS if not argv or any(a in n for a in argv)]
    if not wanted:
        print(f"readme_shots: no picture matches {' '.join(argv)}; "
              f"known: {', '.join(SHOTS)}", file=sys.stderr)
        return 2
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    failed = []
    for name in wanted:
        out = ROOT / "docs" / f"{name}.png"
        with tempfile.TemporaryDirectory(prefix="memlens-shot-") as runs:
            # the runs each shot makes go to a temporary folder, not into the checkout
            done = subprocess.run([sys.executable, str(ROOT / "main.py"), "shot", *SHOTS[name],
                                   "--size", SIZE, "--out", str(out)],
                                  cwd=runs, env=env, capture_output=True, text=True)
        print(f"{'ok ' if done.returncode == 0 else 'FAILED'} {out.relative_to(ROOT)}")
        if done.returncode != 0:
            failed.append(name)
            print(done.stderr.strip()[-800:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
