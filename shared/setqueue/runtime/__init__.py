"""The services' runtime: settings, the service loop, metrics, logs, periodic jobs, the audit, the
demo handler and the ``setqueue`` command. The core (``setqueue``'s other modules) never imports it."""
