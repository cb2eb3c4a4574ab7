"""``python -m ultron.cli``: the ``ultron`` command, as the console script runs it."""

from ultron.cli.main import main

if __name__ == "__main__":
    main()
