"""The numpy row templates write the same numbers Python would, as valid JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memlens.core.exports._text import Choice, Float, Int, Micros, RowTemplate, join_rows


def rows_of(template: RowTemplate, *columns) -> list:
    text = join_rows(template, *columns).decode()
    return json.loads("[" + text.rstrip(",") + "]")


def test_ints_match_python_including_edges_and_big_values():
    rng = np.random.default_rng(0)
    edges = [0, 1, 9, 10, 9999, 10_000, 99_999_999, 100_000_000, 2**46 - 1, 2**46, 2**53 + 1,
             -1, -10_000, -(2**50)]
    values = np.concatenate([edges, rng.integers(-(10**15), 10**15, 5000)]).astype(np.int64)
    t = RowTemplate(["[", Int(int(np.abs(values).max()), signed=True), "],"], chunk=777)
    assert [r[0] for r in rows_of(t, values)] == values.tolist()


def test_unsigned_and_nullable_ints():
    t = RowTemplate(["[", Int(10**6, nullable=True), "],"])
    assert rows_of(t, np.array([5.0, np.nan, 123456.0, np.inf])) == [[5], [None], [123456], [None]]


def test_micros_have_three_decimals():
    ns = np.array([0, 1, 999, 1000, 1_234_567, 86_400 * 10**9 + 5])
    t = RowTemplate(['{"ts":', Micros(int(ns.max())), "},"])
    text = join_rows(t, ns).decode()
    assert text.split(",")[:3] == ['{"ts":0.000}', '{"ts":0.001}', '{"ts":0.999}']
    assert [r["ts"] for r in rows_of(t, ns)] == pytest.approx([v / 1000 for v in ns.tolist()])


def test_floats_round_trip_and_non_finite_is_null():
    rng = np.random.default_rng(1)
    values = np.concatenate([[0.0, -0.0, 1.0, -2.5, 9.9999999999, 1e-300, 1.7e308, 123456789.0],
                             rng.normal(0, 1e6, 500), rng.lognormal(0, 20, 500)])
    t = RowTemplate(["[", Float(), "],"], chunk=100)
    back = [r[0] for r in rows_of(t, values)]
    assert back == pytest.approx(values.tolist(), rel=1e-8)
    assert rows_of(t, np.array([np.nan, np.inf, -np.inf, 2.0])) == [[None], [None], [None], [2.0]]


def test_choices_and_literals_and_a_hole_too_small():
    t = RowTemplate(['{"n":"', Choice(("a", "forward", "")), '","k":', Int(99), "},"])
    assert rows_of(t, np.array([1, 0, 2]), np.array([7, 42, 99])) == [
        {"n": "forward", "k": 7}, {"n": "a", "k": 42}, {"n": "", "k": 99}]
    with pytest.raises(ValueError, match="does not fit"):
        join_rows(t, np.array([0]), np.array([10**6]))
