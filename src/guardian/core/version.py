"""guardian's version (importing this costs nothing)."""

__version__ = "0.1.0"
