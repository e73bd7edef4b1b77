"""The harness's kernel list, by area of the library (importing a module registers its rows)."""
from nkilib_compat.catalogue import (attention, basics, collectives, experimental, mlp, moe, moe_training, mx,  # noqa: F401
                                     norms, pending, projections, routing)
