"""The article's claims, measured: lessons run a preset with a technique off and on."""
