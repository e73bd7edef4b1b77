"""Kernel-side object names of AWS NKI 0.3+: ``nl.NKIObject`` (configuration objects kernels build),
``nl.MemoryRegion`` and buffer comparisons, ``nl.DType`` / ``nki.dtype``, ``nki.typing`` annotations, the
``nki.isa.constants`` module, and ``nisa.nc_version`` ordering."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


class Plan(nl.NKIObject):
    tile: int = 128          # annotated field with a default
    chunks = 4               # plain class attribute (no annotation)
    name: str                # annotated, no default


@dataclass
class Shape(nl.NKIObject):
    rows: int
    cols: int = 512


def test_nkiobject_subclass_built_from_keywords_keeps_class_defaults():
    p = Plan(name="a", chunks=2)
    assert (p.tile, p.chunks, p.name) == (128, 2, "a")
    assert Plan().chunks == 4 and not hasattr(Plan(), "name")


def test_nkiobject_positional_arguments_fill_annotated_fields_in_order():
    p = Plan(64, "b")
    assert (p.tile, p.name, p.chunks) == (64, "b", 4)
    with pytest.raises(TypeError, match="takes 2 positional"):
        Plan(1, "a", 3)
    with pytest.raises(TypeError, match="multiple values"):
        Plan(1, tile=2)
    assert repr(Plan(tile=64)) == "Plan(tile=64)"


@dataclass
class Section(nl.NKIObject):
    index = None          # dataclass attributes without annotations: not dataclass fields
    offset = None


@dataclass(frozen=True)
class Limits(nl.NKIObject):
    upper: float = None
    lower: float = None


@dataclass
class Spec(nl.NKIObject):
    kind: str
    extra: list = field(default_factory=list)

    def __post_init__(self):
        self.extra.append(self.kind)


class Custom(nl.NKIObject):
    def __init__(self, n):
        self.n = n * 2


def test_dataclass_subclass_accepts_unannotated_attributes_as_keywords():
    s = Section(index=3, offset=128)
    assert (s.index, s.offset) == (3, 128) and Section().index is None


def test_dataclass_features_survive_frozen_factories_and_post_init():
    lim = Limits(7.0, -7.0)
    assert (lim.upper, lim.lower) == (7.0, -7.0) and lim == Limits(upper=7.0, lower=-7.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lim.upper = 1.0
    assert hash(lim) == hash(Limits(7.0, -7.0))
    a, b = Spec("x"), Spec(kind="y", extra=[1])
    assert a.extra == ["x"] and b.extra == [1, "y"]
    left_out = Shape(cols=8)                 # a field without a default may be left out: it stays unset
    assert left_out.cols == 8
    with pytest.raises(AttributeError):
        left_out.rows


def test_a_subclass_with_its_own_constructor_keeps_it():
    assert Custom(4).n == 8


def test_dataclass_subclass_keeps_dataclass_construction():
    s = Shape(4)
    assert (s.rows, s.cols) == (4, 512) and isinstance(s, nl.NKIObject) and s == Shape(4, 512)


def test_nkiobject_configs_pass_through_a_kernel_as_constants():
    @nki.jit
    def scale(x, plan):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, nl.multiply(t, float(plan.tile)))
        return out

    x = np.ones((128, 8), np.float32)
    assert np.array_equal(scale(x, Plan(tile=3)), 3 * x)
    assert np.array_equal(scale(x, Plan(tile=5)), 5 * x)   # another config is another trace


def test_buffers_compare_with_memory_regions_and_tensor_buffers():
    assert nl.MemoryRegion.sbuf == nl.sbuf and nl.psum == nl.MemoryRegion.psum
    assert nl.sbuf != nl.psum and nl.shared_hbm in (nl.hbm, nl.shared_hbm)

    @nki.jit
    def where_are_they(x):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.MemoryRegion.sbuf)
        assert t.buffer == nl.sbuf and t.buffer != nl.psum
        assert x.buffer in (nl.hbm, nl.shared_hbm, nl.private_hbm)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.MemoryRegion.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    assert np.array_equal(where_are_they(x), x)


def test_unknown_buffer_is_refused():
    with pytest.raises(ValueError, match="unknown buffer"):
        nki.language.memory.buffer_name("dram")


def test_dtype_module_and_alias_hold_the_language_dtypes():
    assert nki.dtype.bfloat16 is nl.bfloat16 and nki.dtype.float8_e4m3fn_x4 == nl.float8_e4m3fn_x4
    assert nl.DType is nki.dtype.DType

    def annotated(compute_dtype: nki.dtype = nl.float32, x: nki.typing.tensor = None,
                  y: nki.typing.mutable_tensor = None, z: nki.typing.tensor[128, 512] = None):
        return compute_dtype
    assert annotated() is nl.float32


def test_isa_constants_module_is_the_isa_enums():
    from nki.isa import constants
    from nkihub.nki.isa.constants import dge_mode, oob_mode
    assert dge_mode is nisa.dge_mode and oob_mode is nisa.oob_mode
    assert constants.matmul_perf_mode.double_row is nisa.matmul_perf_mode.double_row


def test_nc_version_is_ordered_and_compares_with_generation_numbers():
    assert nisa.nc_version.gen2 < nisa.nc_version.gen3 < nisa.nc_version.gen4
    assert nisa.nc_version.gen3 >= 3 and nisa.nc_version.gen4 > 3 and nisa.nc_version("gen4") is nisa.nc_version.gen4
    seen = {}

    @nki.jit
    def probe(x):
        seen["v"] = nisa.get_nc_version()
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    x = np.zeros((128, 4), np.float32)
    probe.run(x, target="trn1")
    assert seen["v"] is nisa.nc_version.gen2 and seen["v"] < nisa.nc_version.gen3
    probe.run(x, target="trn3")
    assert seen["v"] >= nisa.nc_version.gen4
