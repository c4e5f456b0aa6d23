"""``kafka-health``: one command line, one module per subcommand (``main`` builds the parser and
dispatches; ``common`` holds the exit codes, stop signals and the settings-error report they share)."""
