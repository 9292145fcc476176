"""The package version, in a module of its own at the bottom of the layers: every layer may read it (the report
heads its page with it) without importing the package and, through it, the layers above."""

__version__ = "0.1.0"
