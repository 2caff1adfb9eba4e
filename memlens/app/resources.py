"""The app's files in the `resources` package (icon, stylesheets, Help texts), read so they
work from a source tree and from an installed wheel alike."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from PySide6.QtCore import QBuffer, QByteArray, QSize
from PySide6.QtGui import QIcon, QImageReader, QPixmap

ICON = "memlens.svg"
ICON_SIZES = (16, 32, 64, 256)


def resource_text(name: str) -> str:
    """The text of resources/<name> (e.g. "light.qss", "help/techniques.html")."""
    node = files("memlens.resources")
    for part in name.split("/"):
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def resource_folder() -> str:
    """The resources folder on disk (a wheel installs it as files)."""
    return str(files("memlens.resources"))


def resource_bytes(name: str) -> bytes:
    node = files("memlens.resources")
    for part in name.split("/"):
        node = node.joinpath(part)
    return node.read_bytes()


@cache
def app_icon() -> QIcon:
    """The memlens icon, rendered from the SVG's bytes at each size (no file path needed)."""
    data = QByteArray(resource_bytes(ICON))
    icon = QIcon()
    for size in ICON_SIZES:
        buffer = QBuffer(data)
        reader = QImageReader(buffer, b"svg")
        reader.setScaledSize(QSize(size, size))
        image = reader.read()
        if not image.isNull():
            icon.addPixmap(QPixmap.fromImage(image))
    return icon
