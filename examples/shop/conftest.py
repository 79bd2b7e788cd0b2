"""The fixtures of setqueue.testing (a real server, a queue of each test's own, real workers) for the
shop's tests: `pytest examples/shop` (needs `pip install 'setqueue[embedded]'`)."""

pytest_plugins = ["setqueue.testing"]
