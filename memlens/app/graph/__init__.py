"""The autograd graph tab: the panel, its scene and its layout worker."""
