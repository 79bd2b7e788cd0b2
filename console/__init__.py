"""The operator console: a web page per queue, job and worker, with requeue and delete (see docs/console.md)."""
