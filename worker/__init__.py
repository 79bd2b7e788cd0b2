"""The worker service."""
