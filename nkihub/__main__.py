"""``python -m nkihub``: the ``nkihub`` command."""
import sys

from nkihub.cli import main

sys.exit(main())
