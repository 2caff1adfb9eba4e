"""The native helpers as the tests that compare with them load them (built where they can
be), and the mark that skips such a test, saying why, where they cannot."""

from __future__ import annotations

import pytest

import memlens.core.native

native = memlens.core.native.load()
needs_native = pytest.mark.skipif(
    native is None,
    reason=f"native helpers unavailable: {memlens.core.native.unavailable_reason()}")
