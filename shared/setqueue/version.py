"""The one version of setqueue."""

__version__ = "0.1.0"
