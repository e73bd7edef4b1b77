"""Debug instructions: device_print."""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa.base import DEBUG, register


def _device_print(ins, src, dst, ctx):
    """Print a tensor's values at this point of the program (the simulator's stdout)."""
    value = np.asarray(src["data"]).astype(np.float32) if src["data"].dtype.kind == "f" else np.asarray(src["data"])
    line = f"{ins.attrs.get('prefix', '')}{value}"
    ctx.printed.append(line)
    if ctx.echo:
        print(line)


register("device_print", engines={"vector", "dma"}, execute=_device_print,
         cost=lambda ins, p, t: cr.seconds(cr.MIN_II_CYCLES, t, "vector"), categories={DEBUG},
         rules=())  # prints any tensor, HBM included: no operand rule applies
