"""Targets as data: the constants of shared/hardware.md, resolution by name, alias and environment."""
from __future__ import annotations

import dataclasses

import pytest

from nkihub.simulator.targets import DEFAULT_TARGET, KIB, TARGETS, TRN1, TRN2, TRN3, Target, get_target


def test_three_generations():
    assert set(TARGETS) == {"trn1", "trn2", "trn3"}
    assert [TARGETS[n].nc_version for n in ("trn1", "trn2", "trn3")] == ["gen2", "gen3", "gen4"]


@pytest.mark.parametrize("target,sbuf_kib", [(TRN1, 192), (TRN2, 224), (TRN3, 256)])
def test_memories(target, sbuf_kib):
    assert target.partitions == 128
    assert target.sbuf_bytes_per_partition == sbuf_kib * KIB
    assert target.sbuf_bytes == sbuf_kib * KIB * 128
    assert target.psum_bytes_per_partition == 16 * KIB and target.psum_banks == 8
    assert target.psum_bank_bytes == 2 * KIB


def test_clocks_and_engines():
    assert (TRN1.tensor_clock_hz, TRN1.vector_clock_hz, TRN1.scalar_clock_hz, TRN1.gpsimd_clock_hz) == \
        (2.8e9, 1.12e9, 1.4e9, 1.4e9)
    assert (TRN2.tensor_clock_hz, TRN2.vector_clock_hz) == (2.4e9, 0.96e9)
    assert TRN3.vector_clock_hz == 1.2e9
    assert TRN1.clock_hz("vector") == TRN1.vector_clock_hz
    assert all(t.dma_engines == 16 for t in TARGETS.values())
    assert [t.dma_bytes_per_s_per_engine for t in (TRN1, TRN2, TRN3)] == [17e9, 23e9, 33e9]


def test_generation_features():
    assert not TRN1.psum_bf16_allowed and not TRN2.psum_bf16_allowed and TRN3.psum_bf16_allowed
    assert not TRN1.fp8_double_row and TRN2.fp8_double_row
    assert TRN1.shared_port_limits and not TRN2.shared_port_limits


def test_tile_limits():
    for t in TARGETS.values():
        assert (t.stationary_fmax, t.moving_fmax, t.bn_stats_fmax) == (128, 512, 512)
        assert (t.sbuf_free_elems_max, t.psum_free_bytes_max, t.max_ap_free_dims) == (65536, 16384, 4)
        assert t.psum_free_bytes_max == t.psum_bytes_per_partition


def test_hbm_bandwidth_is_shared_by_the_cores():
    assert TRN1.hbm_bytes_per_s == pytest.approx(820e9 / 2)
    assert TRN2.hbm_bytes_per_s == pytest.approx(2.9e12 / 8)


def test_targets_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TRN1.partitions = 64


def test_get_target(monkeypatch):
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    assert get_target() is TARGETS[DEFAULT_TARGET] is TRN2
    assert get_target("TRN1") is TRN1 and get_target("inf2") is TRN1 and get_target("gen4") is TRN3
    assert get_target(TRN3) is TRN3
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")  # read lazily, on each call
    assert get_target() is TRN3 and get_target("trn1") is TRN1


def test_unknown_target_names_the_choices():
    with pytest.raises(ValueError, match="unknown target 'trn9'.*trn1, trn2, trn3"):
        get_target("trn9")
    assert isinstance(TRN1, Target)
