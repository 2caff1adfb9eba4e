"""Recording a user's own, unmodified training: `api.watch()` starts it, `session.Watch`
records it (the one recorder driven by the script's calls), `script.run_script` runs a
script under it as `python SCRIPT` would. Nothing is imported here: torch loads with the
modules that need it."""
