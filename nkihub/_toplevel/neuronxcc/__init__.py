"""nkihub's stand-in for neuronx-cc's ``neuronxcc`` package (see ``nkihub.aliases``): found only where the
real neuronx-cc is not installed, it answers ``neuronxcc.nki`` with nkihub's old-dialect layer
``nkihub.nki.compat``. Nothing else of neuronx-cc is simulated."""
import sys

from nkihub import aliases

__path__ = []  # a package whose only submodule is the alias below
sys.meta_path.insert(0, aliases.AliasFinder(f"{__name__}.nki", "nkihub.nki.compat"))
