"""The long-lived services of one machine, each started and stopped by its own tool: the
embedded Redis server and the Prefect server, as ``ultron server start | stop | status`` shows
them, and the choice of the Redis a job uses. Runs in the flow process and the CLI only.
"""
