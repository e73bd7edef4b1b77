"""The ``nki`` command: compile, profile and simulate kernels from the shell (one module per subcommand)."""
