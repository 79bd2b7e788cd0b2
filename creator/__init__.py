"""The creator service."""
