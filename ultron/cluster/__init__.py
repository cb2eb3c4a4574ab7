"""The cluster backends: where trials run (``local``, ``address``, ``kubernetes``, ``slurm``),
the GPUs of this machine, and the forkserver local workers start from. Runs in the flow process
(and, for the forkserver and the GPU pinning, the local cluster's workers as they start).
"""
