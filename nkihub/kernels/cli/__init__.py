"""The ``kernels`` command: one module per subcommand, each with ``add_parser`` and ``run``."""
