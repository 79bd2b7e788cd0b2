"""The services' runtime, apart from the queue core: settings from the environment
(``settings``), the service loop with signals and Redis outages (``service``), Prometheus metrics
(``metrics``) and their HTTP server (``http``), logs (``logs``), periodic jobs (``periodic``), the
chaos runs' audit (``audit``), the demo job handler (``demo``) and the ``setqueue`` command
(``cli``). The core (``setqueue`` and its other modules) never imports anything from here."""
