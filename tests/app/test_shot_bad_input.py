"""`shot` refuses a window size the raster engine cannot make and a timeout that is no time,
with exit 2, before it opens any window."""

from __future__ import annotations

import pytest

import main as memlens_main


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
