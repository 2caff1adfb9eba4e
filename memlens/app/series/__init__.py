"""What the plots draw, as plain numpy (no Qt): run series, pyramids, pins, effects."""
