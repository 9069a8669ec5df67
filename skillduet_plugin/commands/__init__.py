"""Subcommands of the ``skillduet`` console script, one module each."""
