"""The Ranks tab: a torchrun job's ranks on the same axes, the per-rank table under the
plots, the job's imbalance in one line; opened or followed live (rank_job)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from memlens.app.ranks.rank_job import RankJob
from memlens.app.ranks.rank_plots import RankPlots
from memlens.app.ranks.rank_table import RankTable
from memlens.app.series.rank_series import rank_lines
from memlens.core.runfolder.ranks import (
    JobFigures,
    RankFigures,
    imbalance_text,
    note,
    rank_number,
    sharding_text,
)


class RanksTab(QWidget):
    """`show_job(folder, follow)`; `job` the RankJob shown, `figures` its latest figures."""

    refreshed = Signal()  # the plots and the table show the job's latest rows

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ranks_tab")
        self.job: RankJob | None = None
        self.figures: JobFigures | None = None
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Categories of:"))
        self.rank_combo = QComboBox()
        self.rank_combo.setObjectName("ranks_stack_combo")
        self.rank_combo.setToolTip("The rank whose memory by category is stacked below")
        self.rank_combo.currentIndexChanged.connect(self._on_stacked_rank_changed)
        controls.addWidget(self.rank_combo)
        self.multiples_box = QCheckBox("Small multiples")
        self.multiples_box.setObjectName("ranks_multiples_box")
        self.multiples_box.setToolTip("A plot per rank, each with the same axes")
        self.multiples_box.toggled.connect(self._on_multiples_changed)
        controls.addWidget(self.multiples_box)
        controls.addStretch(1)
        self.plots = RankPlots()
        self.summary = QLabel("")
        self.summary.setObjectName("ranks_summary")
        self.summary.setWordWrap(True)
        # What sharding does on the ranks (FSDP's all-gather peak, uneven shards, DDP's
        # buckets): a line of its own, shown for such a job only.
        self.sharding = QLabel("")
        self.sharding.setObjectName("ranks_sharding")
        self.sharding.setWordWrap(True)
        self.sharding.setVisible(False)
        self.table = RankTable()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(controls)
        layout.addWidget(self.plots, 3)
        layout.addWidget(self.summary)
        layout.addWidget(self.sharding)
        layout.addWidget(self.table, 1)

    @property
    def folder(self) -> Path | None:
        return self.job.folder if self.job is not None else None

    def show_job(self, folder: Path, follow: bool) -> None:
        self.clear()
        self.job = RankJob(folder, follow, self)
        self.job.changed.connect(self._on_job_changed)
        self.job.start()

    def clear(self) -> None:
        if self.job is not None:
            self.job.stop()
            self.job.deleteLater()
        self.job, self.figures = None, None
        self.plots.clear()
        self.table.setRowCount(0)
        self.summary.setText("")
        self.sharding.setText("")
        self.sharding.setVisible(False)
        self.rank_combo.blockSignals(True)
        self.rank_combo.clear()
        self.rank_combo.blockSignals(False)

    def _on_job_changed(self) -> None:
        job = self.job
        self.figures = figures = job.figures()
        by_rank = {r.rank: r for r in figures.ranks}
        labels = {r.rank: _label(figures, r) for r in figures.ranks}
        self.plots.set_lines({rank_number(f): rank_lines(h) for f, h in job.histories.items()},
                             labels)
        self._offer_ranks(sorted(by_rank))
        self._show_stacked()
        self.table.show_job(figures)
        problems = [f"{f.name}: {text}" for f, text in job.problems.items()]
        self.summary.setText("; ".join([imbalance_text(figures), *problems]))
        self.sharding.setText(sharding_text(figures))
        self.sharding.setVisible(bool(self.sharding.text()))
        self.refreshed.emit()

    def _offer_ranks(self, ranks: list[int]) -> None:
        have = [self.rank_combo.itemData(i) for i in range(self.rank_combo.count())]
        if have == ranks:
            return
        self.rank_combo.blockSignals(True)
        chosen = self.rank_combo.currentData()
        self.rank_combo.clear()
        for rank in ranks:
            self.rank_combo.addItem(f"rank {rank}", rank)
        # The largest rank first: what the user looks at first.
        first = chosen if chosen in ranks else (
            self.figures.largest.rank if self.figures.largest is not None else ranks[0])
        self.rank_combo.setCurrentIndex(ranks.index(first))
        self.rank_combo.blockSignals(False)

    def _on_stacked_rank_changed(self, _index: int) -> None:
        self._show_stacked()

    def _show_stacked(self) -> None:
        rank = self.rank_combo.currentData()
        if self.job is None or rank is None:
            return
        folder = next((f for f in self.job.histories if rank_number(f) == rank), None)
        by_rank = {r.rank: r for r in self.figures.ranks}
        self.plots.set_stacked(rank, rank_lines(self.job.histories[folder]),
                               _label(self.figures, by_rank[rank]))

    def _on_multiples_changed(self, on: bool) -> None:
        self.plots.show_multiples(on)
        self.rank_combo.setEnabled(not on)  # each multiple stacks its own rank


def _label(job: JobFigures, r: RankFigures) -> str:
    mark = note(job, r).replace("running", "").strip(", ")
    return f"rank {r.rank}" + (f" ({mark})" if mark else "")
