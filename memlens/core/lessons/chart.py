"""One lesson's chart as SVG, written by hand (core draws without Qt): for each metric a pair
of bars, off and on, scaled to the larger; time bars carry the 95% interval of on/off."""

from __future__ import annotations

from html import escape

from memlens.core.units import format_bytes, format_ms

WIDTH = 720
LABEL_W = 210
BAR_W = 330
ROW_H = 22
GROUP_GAP = 16
TOP = 46
OFF_COLOR, ON_COLOR, TEXT, MUTED = "#9aa4ae", "#2f7ed8", "#1d2329", "#5f6b76"
FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


def format_value(kind: str, value: float | None, per_step: bool = False) -> str:
    if value is None:
        return "n/a"
    if kind == "memory":
        return format_bytes(value) + (" / step" if per_step else "")
    if kind == "time":
        return format_ms(value)
    return f"{value:.0f}"


def chart_svg(rows: list) -> str:
    """SVG text for one lesson on one preset: `rows` are its LessonRows (or their dicts)."""
    rows = [r if isinstance(r, dict) else r.to_dict() for r in rows]
    first = rows[0]
    height = TOP + len(rows) * (2 * ROW_H + GROUP_GAP) + 30
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
        f"viewBox='0 0 {WIDTH} {height}' {FONT} font-size='12'>",
        f"<rect width='{WIDTH}' height='{height}' fill='white'/>",
        _text(10, 20, f"{first['title']} ({first['preset']}, {first['device']})", size=15,
              weight="bold"),
        _rect(LABEL_W, 30, 10, 10, OFF_COLOR),
        _text(LABEL_W + 14, 39, first["off_label"], color=MUTED),
        _rect(LABEL_W + 170, 30, 10, 10, ON_COLOR),
        _text(LABEL_W + 184, 39, first["on_label"], color=MUTED),
    ]
    y = TOP
    for r in rows:
        out.extend(_group(r, y))
        y += 2 * ROW_H + GROUP_GAP
    out.append(_text(10, height - 10, "memory: exact bytes; time: medians, whisker = off x "
                     "the 95% interval of on/off over the rounds, widened to the run's own "
                     "noise", size=10, color=MUTED))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _group(r: dict, y: float) -> list[str]:
    off, on = r["off"], r["on"]
    growth = "growth" in r["metric"]
    high = r["ci_high"] * off if r["kind"] == "time" and r["ci_high"] and off else 0
    scale = max(abs(off or 0), abs(on or 0), high) or 1.0
    parts = [_text(10, y + 15, r["metric"], weight="bold")]
    if r["verdict"]:
        parts.append(_text(10, y + 31, r["verdict"], color=_verdict_color(r["verdict"])))
    ci = None
    if r["kind"] == "time" and off and r["ci_low"] is not None and r["ci_high"] is not None:
        ci = (LABEL_W + BAR_W * r["ci_low"] * off / scale,
              LABEL_W + BAR_W * r["ci_high"] * off / scale)
    for i, (value, color) in enumerate(((off, OFF_COLOR), (on, ON_COLOR))):
        top = y + i * ROW_H + 3
        w = BAR_W * max(value or 0, 0) / scale
        end = max(LABEL_W + w, ci[1]) if (i and ci) else LABEL_W + w
        parts.append(_rect(LABEL_W, top, w, ROW_H - 6, color))
        parts.append(_text(end + 6, top + 12, format_value(r["kind"], value, growth)))
    if ci is not None:
        mid = y + ROW_H + 3 + (ROW_H - 6) / 2
        x0, x1 = ci
        parts.append(f"<path d='M{x0:.1f} {mid - 5:.1f}v10M{x0:.1f} {mid:.1f}H{x1:.1f}"
                     f"M{x1:.1f} {mid - 5:.1f}v10' stroke='{TEXT}' stroke-width='1.5' "
                     "fill='none'/>")
    return parts


def _verdict_color(verdict: str) -> str:
    return {"confirmed": "#2a8a3e", "larger": "#2a8a3e", "contradicted": "#c0392b"}.get(
        verdict, MUTED)


def _rect(x: float, y: float, w: float, h: float, color: str) -> str:
    return f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' fill='{color}'/>"


def _text(x: float, y: float, text: str, *, size: int = 12, weight: str = "normal",
          color: str = TEXT) -> str:
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' font-weight='{weight}' "
            f"fill='{color}'>{escape(text)}</text>")
