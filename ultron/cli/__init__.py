"""The ``ultron`` command line (typer): :mod:`ultron.cli.main` holds the app and ``ultron run``;
each other module registers one family of commands on it."""
