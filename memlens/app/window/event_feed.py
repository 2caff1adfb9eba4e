"""A run's new events and graph captures, moved from its history to where they show: the
markers on the plots, the events list, the techniques panel (a toggle applied or refused),
"What just happened" and the graph tab."""

from __future__ import annotations

from memlens.core.records import RunEvent


class EventFeed:
    """Counts what it has moved of the run on screen (`reset()` for another run)."""

    def __init__(self, plots, events_panel, techniques_panel, effects, graph_tab) -> None:
        self._plots, self._events_panel = plots, events_panel
        self._techniques, self._effects, self._graph_tab = techniques_panel, effects, graph_tab
        self._events_seen = 0
        self._graphs_seen = 0

    def reset(self) -> None:
        self._events_seen = self._graphs_seen = 0

    def pull(self, history, running: bool) -> RunEvent | None:
        """Move what is new; returns the newest training error that paused a live run
        (the banner explains it), else None."""
        paused_by = None
        events = history.events(self._events_seen)
        self._events_seen += len(events)
        # in batches: a folder opened with thousands of events is laid out once
        self._plots.add_events([e for e in events if e.on_timeline])
        first_row = self._events_panel.list.count()
        self._events_panel.add_events(events)
        for row, event in enumerate(events, first_row):
            if event.kind == "toggle":
                self._techniques.set_value(event.key, event.new)
                self._techniques.show_note("")
                self._effects.add(row, event)
            elif event.kind == "refused":  # the panel shows what the run kept, and why
                self._techniques.set_value(event.key, event.old)
                self._techniques.show_note(f"{event.message}. {event.explanation}")
            elif event.kind == "error" and running and event.key != "run failed":
                paused_by = event
        self._pull_graphs(history)
        return paused_by

    def _pull_graphs(self, history) -> None:
        # history.graphs keeps only the newest captures; graphs_seen counts them all.
        seen = history.graphs_seen
        if seen <= self._graphs_seen:
            return
        graphs = history.graphs
        new = graphs[max(0, len(graphs) - (seen - self._graphs_seen)):]
        self._graphs_seen = seen
        self._graph_tab.show_snapshots(new)
