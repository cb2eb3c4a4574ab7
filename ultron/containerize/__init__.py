"""The On Demand Containerizer (paper V-B): the trial environment of a code base, the check of
the model class in it, safe archive extraction and images. Runs in the flow process and the CLI.

Modules are imported one by one (this ``__init__`` imports nothing): building an environment
needs none of the rest.
"""
