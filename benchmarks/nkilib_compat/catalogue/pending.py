"""Rows whose launch the harness cannot express yet: they import the kernel and its reference (so the
table shows how far the library gets against nkihub's ``nki``) and then stop with the reason."""
from __future__ import annotations

from nkilib_compat.rows import row


class NotLaunchable(RuntimeError):
    """The harness has no launch for this row yet (the message says what is missing)."""


def _imports_then(lib, specs, reason):
    for spec in specs:
        lib.get(spec)
    raise NotLaunchable(reason)


MULTI_RANK = ("the test's four-layer TP4 wrapper (collective_ranks=4 copies of the whole transformer); "
              "harness inputs not written yet")


@row("transformer_tkg", kernel="experimental.transformer.transformer_tkg:transformer_tkg",
     reference="experimental.transformer.transformer_tkg_torch:llama3_transformer_fwd_tkg_torch",
     source="test_transformer_tkg.py (TP4 four-layer wrapper)", needs="collectives")
def transformer_tkg(lib):
    _imports_then(lib, ["experimental.transformer.transformer_tkg:transformer_tkg",
                        "experimental.transformer.transformer_tkg_torch:llama3_transformer_fwd_tkg_torch"],
                  MULTI_RANK)


MX = ("harness inputs not written yet: the test builds its MX MoE inputs and golden with ~650 lines of its own "
      "helpers (build_moe_bwmm_mx_cte, golden_moe_bwmm_mx_cte), not restated here")


@row("moe_cte_mx", kernel="core.moe.moe_cte.bwmm_shard_on_block_mx:bwmm_shard_on_block_mx",
     reference="the test's MX golden", source="test_moe_bwmm_mx_cte.py", needs="mx")
def moe_cte_mx(lib):
    _imports_then(lib, ["core.moe.moe_cte.bwmm_shard_on_block_mx:bwmm_shard_on_block_mx"], MX)
