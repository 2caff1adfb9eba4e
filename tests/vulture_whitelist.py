"""Names vulture (at 80% confidence) takes for unused that are used: each is a parameter a
caller passes by its name or an interface requires (tests/test_structure.py runs vulture
with this file)."""

# pyqtgraph calls a GraphicsObject's dataBounds(axis, frac=1.0, orthoRange=None) with
# orthoRange as a keyword: the name is its interface (app/timeline/edge_repaint.py,
# app/timeline/stacked_area.py).
orthoRange  # noqa: B018, F821
# Lightning's Callback.on_train_batch_start(trainer, pl_module, batch, batch_idx): the
# signature Lightning calls (memlens/integrations/lightning.py).
batch_idx  # noqa: B018, F821
