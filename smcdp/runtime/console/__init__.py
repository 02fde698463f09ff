"""The party's read-only web console and Prometheus metrics (docs/operations.md).

* :mod:`.config` -- ``[console]`` in the party's TOML;
* :mod:`.readmodel` -- what the console reads (sessions, traffic, peers, budgets, audit);
* :mod:`.metrics` -- ``/metrics`` (prometheus-client, one registry per party);
* :mod:`.pages` and :mod:`.server` -- the HTML and the aiohttp server on the party's event loop.
"""
