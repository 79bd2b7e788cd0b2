"""The cleaner service."""
