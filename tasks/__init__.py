"""Prefect tasks, one step of a job each: containerize, acquire_resources, search_loop, finalize.

Each module is named after the one task it defines; import the task from its module (a
re-export here would hide the module behind the task of the same name).
"""
