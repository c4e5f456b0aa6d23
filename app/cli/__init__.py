"""``kafka-health``: one command line, one module per subcommand (``main`` parses and dispatches;
``common`` holds the exit codes, stop signals and the settings-error report every subcommand shares)."""

from app.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
