"""nisa.rand2, the random generator state (rand_get_state / rand_set_state), get_nc_sub_version,
NkiInstruction and nl.average."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import KernelRuleError


@nki.jit(platform_target="trn3")
def replay(x):
    state = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=state)
    a = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=a, min=-2.0, max=3.0)
    nisa.rand_set_state(src_seeds=state)
    b = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=b, min=-2.0, max=3.0)
    out = nl.ndarray((2, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0], src=a)
    nisa.dma_copy(dst=out[1], src=b)
    return out


def test_setting_the_read_state_replays_the_stream():
    out = replay(np.zeros(1, np.float32))
    np.testing.assert_array_equal(out[0], out[1])
    assert out.min() >= -2.0 and out.max() <= 3.0 and out.std() > 0.5


def test_rand2_is_neuroncore_v4_only():
    with pytest.raises(KernelRuleError, match="NeuronCore-v4"):
        replay.specialize(np.zeros(1, np.float32), target="trn2")


@nki.jit
def bad_state(x):
    s = nl.ndarray((128, 5), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=s)
    return x


def test_state_tile_size_is_checked():
    with pytest.raises(KernelRuleError, match="rng-state"):
        bad_state(np.zeros(1, np.float32))


def test_sub_version_and_instruction_handles():
    assert nisa.get_nc_sub_version() in (0, 1)
    ins = nisa.NkiInstruction("a")
    assert ins.depends_on(nisa.NkiInstruction("b")) is ins and len(ins.producers) == 1
    assert repr(nl.average) == "nl.average"
