"""The zoo (tests/zoo/test_zoo.py) runs real training scripts as subprocesses: minutes, not
seconds. It runs when asked for: `pytest tests/zoo`, `pytest -m zoo`, or MEMLENS_ZOO=1;
otherwise its tests are skipped, so the rest of the suite keeps its pace."""

import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "zoo: a real training script watched by memlens")
    config.addinivalue_line("markers", "slow: a zoo case that takes more than a few seconds")


def _asked_for(config) -> bool:
    if os.environ.get("MEMLENS_ZOO") == "1":
        return True
    if "zoo" in (config.getoption("markexpr", "") or ""):
        return True
    return any("zoo" in str(a) for a in config.args)


def pytest_collection_modifyitems(config, items):
    if _asked_for(config):
        return
    skip = pytest.mark.skip(reason="the zoo runs when asked for: pytest tests/zoo, -m zoo "
                            "or MEMLENS_ZOO=1")
    for item in items:
        if item.get_closest_marker("zoo") is not None:
            item.add_marker(skip)
