"""Prefect flows: they only compose tasks. ``ultron.flows.hpo_job.hpo_job`` is the HPO job.

Each module is named after the one flow it defines; import the flow from its module (a
re-export here would hide the module behind the flow of the same name).
"""
