"""The worker side: what a Dask worker runs for each trial (the runner, its warm trial
processes, the checkpoint syncer) and the trial process itself (:mod:`ultron.worker.process`),
a child of the worker that runs the user's ``score``.

Modules are imported one by one (this ``__init__`` imports nothing): the trial process imports
a few of them and must not pay for the rest.
"""
