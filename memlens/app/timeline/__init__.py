"""The three live plots on one step axis, and the pyqtgraph items they are made of."""
