"""`shot` refuses a window size the raster engine cannot make and a timeout that is no time,
with exit 2, before it opens any window; a full disk under its PNG is one line, no
temporary file left."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import main as memlens_main
from memlens.core.runfolder.history_files import write_history
from tests.core.helpers import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good") / "run"
    history, _summary = run("mlp", steps=3)
    write_history(history, folder)
    return folder


@pytest.mark.parametrize("args,named", [
    (["--size", "100000x100000"], "--size"), (["--size", "7681x800"], "--size"),
    (["--timeout", "-1"], "--timeout"), (["--timeout", "0"], "--timeout"),
    (["--timeout", "nan"], "--timeout"), (["--timeout", "inf"], "--timeout"),
])
def test_bad_size_or_timeout_exits_2_and_writes_nothing(capsys, tmp_path, args, named):
    out = tmp_path / "x.png"
    code = memlens_main.main(["shot", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2 and named in err and "Traceback" not in err
    assert not out.exists()


FULL_DISK = """
import errno, os, sys
import memlens.core.runfolder.atomic as atomic

def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

atomic.os = type(sys)("os_full")
atomic.os.__dict__.update({k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
atomic.os.fsync = full
sys.path.insert(0, sys.argv[1])
import main
sys.exit(main.main(sys.argv[2:]))
"""


def test_shot_to_a_full_disk_is_one_line_and_leaves_no_temporary(tmp_path, good_run):
    out = tmp_path / "pictures" / "s.png"
    out.parent.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(ROOT), "shot", "--open", str(good_run),
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("memlens shot:")]
    assert len(lines) == 1 and "No space left on device" in lines[0]
    assert "libpng" not in proc.stderr
    assert list(out.parent.iterdir()) == []
