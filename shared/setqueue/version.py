"""The version of setqueue (one place: the package, the services and the command line read it)."""

__version__ = "0.1.0"
