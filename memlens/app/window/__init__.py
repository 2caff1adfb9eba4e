"""The main window and what belongs to it alone: its layout and menus, the run it drives,
opening, following and exporting runs, pins, and start-up."""
