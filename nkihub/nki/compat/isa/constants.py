"""``neuronxcc.nki.isa.constants``: the enums instructions take (``from neuronxcc.nki.isa.constants import
dge_mode``, as the old dialect's dma_transpose page writes), the same classes as ``nki.isa.constants``."""
from nkihub.nki.isa.constants import *  # noqa: F401,F403
from nkihub.nki.isa.constants import __all__  # noqa: F401
