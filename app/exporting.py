"""File > Export: the run files (the CLI's writers), each plot as PNG and SVG, and the
timeline formats of core.exports where that module is present."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from core.atomic import ExportError
from core.run_files import write_history

RUN_FILES = "run files"
PNG = "png"
SVG = "svg"


def extra_formats() -> tuple[str, ...]:
    """snapshot / trace / timeline, when core.exports offers export_run."""
    try:
        import core.exports as exports
    except ImportError:
        return ()
    if not hasattr(exports, "export_run"):
        return ()
    formats = getattr(exports, "FORMATS", ("snapshot", "trace", "timeline"))
    return tuple(f for f in formats if f != "all")


def _export_scene(widget, path: Path, kind: str) -> Path:
    from pyqtgraph.exporters import ImageExporter, SVGExporter

    # Write beside the target under a temporary name, then rename: never a half file.
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    scene = widget.scene()
    try:
        if kind == PNG:
            exporter = ImageExporter(scene)
            exporter.parameters()["width"] = int(scene.sceneRect().width() * 2)
            exporter.parameters()["antialias"] = True
        else:
            exporter = SVGExporter(scene)
        exporter.export(fileName=str(tmp))
        if not tmp.is_file():
            raise ExportError(f"cannot write {str(path)!r}: the plot exporter wrote nothing")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, ExportError):
            raise
        raise ExportError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    return path


def export_run(history, plots: dict, folder: str | Path, choices: set[str]
               ) -> tuple[list[Path], list[str]]:
    """Write what `choices` names into `folder`. Returns (files written, problems)."""
    folder = Path(folder)
    written: list[Path] = []
    problems: list[str] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create {str(folder)!r}: {exc.strerror or exc}. "
                          "Choose a folder you can write to.") from exc
    if RUN_FILES in choices:
        written += write_history(history, folder)
    for kind in (PNG, SVG):
        if kind not in choices:
            continue
        for name, widget in plots.items():
            try:
                written.append(_export_scene(widget, folder / f"{name}.{kind}", kind))
            except ExportError as exc:
                problems.append(str(exc))
    extras = [f for f in extra_formats() if f in choices]
    if extras:
        from core import exports

        for fmt in extras:
            try:
                result = exports.export_run(history, folder, [fmt])
            except (OSError, ValueError, RuntimeError) as exc:
                problems.append(f"{fmt}: {exc}")
                continue
            if isinstance(result, (list, tuple)):
                written += [Path(p) for p in result]
            elif isinstance(result, (str, Path)):
                written.append(Path(result))
    return written, problems
