"""The Redis side every ultron process shares: the client that rides out a restart or a Sentinel
failover (:mod:`ultron.redis.client`) and every key we use (:mod:`ultron.redis.keys`).

Runs in every kind of process (the flow, Dask workers, trial processes, the CLI); the embedded
server itself is started by :mod:`ultron.servers`.
"""
