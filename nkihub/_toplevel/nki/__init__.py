"""nkihub's stand-in for AWS's ``nki`` package (see ``nkihub.aliases``): found only where AWS's own ``nki``
is not installed, it makes ``nki`` the module ``nkihub.nki``."""
import sys

from nkihub import aliases

sys.modules[__name__] = aliases.bind(__name__, "nkihub.nki")
