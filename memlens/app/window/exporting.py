"""File > Export: the run files (copied from the run's folder where they are complete, else
written by the CLI's writers), each plot as PNG and SVG, and the formats of memlens.core.exports
where that module is present."""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from memlens.core.runfolder.atomic import ExportError
from memlens.core.runfolder.history_files import export_run_files

RUN_FILES = "run files"
PNG = "png"
SVG = "svg"


def extra_formats() -> tuple[str, ...]:
    """snapshot / trace / timeline (and allocations, only when ticked)."""
    import memlens.core.exports as exports

    return tuple(f for f in (*exports.FORMATS, *exports.ON_REQUEST) if f != "all")


def on_request_formats() -> tuple[str, ...]:
    """Formats written only when named (core.exports.ON_REQUEST): never ticked by default."""
    try:
        from memlens.core.exports import ON_REQUEST
    except ImportError:
        return ()
    return ON_REQUEST


def _render_scene(widget, path: Path, kind: str) -> None:
    """Paint the plot's whole scene (legend, both axes, markers) into a PNG or an SVG."""
    from PySide6.QtCore import QRectF, QSize
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgGenerator

    source = QRectF(widget.viewport().rect())
    if kind == PNG:
        scale = 2  # crisp on high-density screens and in documents
        image = QImage(int(source.width()) * scale, int(source.height()) * scale,
                       QImage.Format_ARGB32)
        image.fill(0xFFFFFFFF)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.Antialiasing)
        widget.scene().render(painter, QRectF(image.rect()), widget.mapToScene(
            widget.viewport().rect()).boundingRect())
        painter.end()
        if not image.save(str(path), "PNG"):
            raise OSError(f"Qt could not write {path}")
        return
    generator = QSvgGenerator()
    generator.setFileName(str(path))
    generator.setSize(QSize(int(source.width()), int(source.height())))
    generator.setViewBox(source)
    generator.setTitle(widget.objectName())
    painter = QPainter(generator)
    widget.scene().render(painter, source, widget.mapToScene(
        widget.viewport().rect()).boundingRect())
    painter.end()


def _export_scene(widget, path: Path, kind: str) -> Path:
    # Write beside the target under a temporary name, then rename: never a half file.
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        _render_scene(widget, tmp, kind)
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise ExportError(f"cannot write {str(path)!r}: the plot renderer wrote nothing")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, ExportError):
            raise
        raise ExportError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    return path


def export_run(history, plots: dict, folder: str | Path, choices: set[str],
               source: Path | None = None) -> tuple[list[Path], list[str]]:
    """Write what `choices` names into `folder`. Returns (files written, problems).

    `source` is the run's own folder (where its session streamed the run files, or where
    it was opened from): run files there that match the history are copied, not rewritten.
    """
    folder = Path(folder)
    written: list[Path] = []
    problems: list[str] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create {str(folder)!r}: {exc.strerror or exc}. "
                          "Choose a folder you can write to.") from exc
    # The run files are mostly a copy and a sync to disk, waiting on I/O: a helper thread
    # does them while this one renders the plots and writes the other formats.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlens-run-files") as aside:
        run_files = (aside.submit(export_run_files, history, folder, source)
                     if RUN_FILES in choices else None)
        for kind in (PNG, SVG):
            if kind not in choices:
                continue
            for name, widget in plots.items():
                try:
                    with widget.for_export():  # its own step axis, as no stack shows it
                        written.append(_export_scene(widget, folder / f"{name}.{kind}", kind))
                except ExportError as exc:
                    problems.append(str(exc))
        extras = [f for f in extra_formats() if f in choices]
        notes: list[str] = []
        if extras:
            from memlens.core import exports

            missing = unavailable_formats(history)
            problems += [f"{fmt}: {missing[fmt]}" for fmt in extras if fmt in missing]
            wanted = [fmt for fmt in extras if fmt not in missing]
            if wanted:
                try:
                    written += [Path(p) for p in exports.export_run(history, folder, wanted,
                                                                    notes=notes)]
                except (OSError, ValueError, RuntimeError) as exc:
                    problems.append(str(exc))
        if run_files is not None:
            try:
                written[:0] = run_files.result()
            except (OSError, ValueError) as exc:  # ExportError, or a source that changed
                problems.insert(0, str(exc))
    problems += notes
    return written, problems


def unavailable_formats(history) -> dict[str, str]:
    """Timeline formats this run cannot give, with the reason (a snapshot needs precise)."""
    from memlens.core.exports import unavailable

    return unavailable(history)
