"""The worker service."""

import setqueue.runtime  # noqa: F401 - first: it exits, in one line, if a folder shadows setqueue
