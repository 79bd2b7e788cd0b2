"""Example apps that use setqueue as a library (each is run end to end by tests/test_examples.py)."""
