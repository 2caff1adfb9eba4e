"""A rendered image as PNG bytes, and written atomically: one way for the screenshots, the
exported plots and graphs, and the lessons' charts."""

from __future__ import annotations

from pathlib import Path


def png_bytes(image) -> bytes | None:
    """`image` (a QImage or QPixmap) encoded as PNG in memory, or None where it cannot be
    (encoding in memory first: a full disk is then a write error, not libpng's)."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    return bytes(data) if image.save(buffer, "PNG") else None


def save_png(image, path: str | Path) -> str:
    """Write `image` as a PNG file atomically; "" when written, else what went wrong (and
    nothing is left where the file goes)."""
    from memlens.core.runfolder.atomic import ExportError, atomic_write_bytes

    data = png_bytes(image)
    if data is None:
        return f"cannot encode the image as PNG ({image.width()}x{image.height()})"
    try:
        atomic_write_bytes(path, data)
    except ExportError as exc:
        return str(exc)
    return ""
