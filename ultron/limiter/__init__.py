"""The Resource Limiter (paper Fig. 7): leases of compute units in Redis, made atomic by one Lua
script (:mod:`ultron.limiter.script`), the stored limits, and the thread that keeps a lease
alive. Runs in the flow process and the CLI only.
"""
