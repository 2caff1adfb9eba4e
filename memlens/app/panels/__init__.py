"""The run's controls and lists beside the plots: settings, techniques, events, pins, status."""
