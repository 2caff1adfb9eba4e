"""The one recorder every producer of a run measures through (recorder.Recorder), and its
parts: how memory is counted (keys, probe, saved, precise, heap, amp_casts) and where a run
is written (output)."""
