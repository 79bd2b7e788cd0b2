"""The operator console: a web page per queue, job and worker, with requeue and delete (see docs/console.md)."""

import setqueue.runtime  # noqa: F401 - first: it exits, in one line, if a folder shadows setqueue
