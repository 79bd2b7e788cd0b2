"""The matrices, one module each: cpu, io, cluster. See run.py for what a module provides."""
