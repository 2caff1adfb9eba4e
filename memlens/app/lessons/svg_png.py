"""SVG text to a PNG file through Qt's SVG renderer: core writes charts as SVG by hand, and
the PNG beside each comes from here (no display needed: the CLI's application is offscreen;
imported lazily by the CLI)."""

from __future__ import annotations

from pathlib import Path

from memlens.core.runfolder.atomic import ExportError

SCALE = 1.0  # PNG pixels per SVG unit


def svg_to_png(svg: str, path: str | Path, scale: float = SCALE) -> None:
    from PySide6.QtCore import QByteArray, QRectF
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer
    from PySide6.QtWidgets import QApplication

    if QApplication.instance() is None:  # the CLI: fonts need a GUI application
        # offscreen whatever the environment says: a PNG needs no display, and Qt aborts
        # the process (exit 134) when the platform it is told to use cannot load. A
        # QApplication, not a QGuiApplication: whatever runs in this process later (the
        # lessons CLI called from a test session, a window) can still make widgets, which
        # Qt refuses, aborting, under a QGuiApplication.
        _keep.append(QApplication(["memlens", "-platform", "offscreen"]))
    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    if not renderer.isValid():
        raise ExportError(f"cannot render {Path(path).name}: the chart's SVG is not valid")
    size = renderer.defaultSize()
    image = QImage(round(size.width() * scale), round(size.height() * scale),
                   QImage.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    renderer.render(painter, QRectF(0, 0, image.width(), image.height()))
    painter.end()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if not image.save(str(tmp), "PNG"):
        raise ExportError(f"cannot write {str(path)!r}. Choose a folder you can write to.")
    tmp.replace(path)


_keep: list = []  # the CLI's application object lives as long as the process
