"""Kernels with tuning parameters for the autotuner's tests (imported by file, as ``nkihub tune`` does):
``tile`` rows per load (over 128 breaks the partition rule), ``skip`` skips the multiply (faster, and
wrong), ``unroll`` changes nothing (a large space for the TPE search); ``scale_cols`` works on wide
activations ``cols`` columns at a time, and ``only_full_width`` takes 65536 columns and nothing else."""
import nki
import nki.language as nl


@nki.jit
def tiled_scale(x, tile=128, skip=False, unroll=0):
    """2 * x for x [R, C] fp32, R a multiple of ``tile``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n = x.shape[0] // tile
    for i in nl.affine_range(n):
        rows = nl.ds(i * tile, tile)
        t = nl.load(x[rows, :])
        nl.store(out[rows, :], t if skip else nl.multiply(t, 2.0))
    return out


@nki.jit
def scale_cols(x, cols=2048):
    """2 * x for x [128, C] fp32, C a multiple of ``cols``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(x.shape[1] // cols):
        c = nl.ds(j * cols, cols)
        nl.store(out[:, c], nl.multiply(nl.load(x[:, c]), 2.0))
    return out


@nki.jit
def only_full_width(x, cols=2048):
    """scale_cols for x [128, 65536] only."""
    if x.shape[1] != 65536:
        raise ValueError(f"only_full_width takes 65536 columns, got {x.shape[1]}")
    return scale_cols(x, cols=cols)


def ref(x):
    return x * 2


def wrong_ref(x):
    return x * 3


@nki.autotune(space={"tile": [32, 64, 128, 256], "skip": [False, True]}, key=["x"], target=("trn1", "trn2"),
              check=ref, workers=1)
@nki.jit
def tuned_scale(x, tile=128, skip=False):
    return tiled_scale(x, tile=tile, skip=skip)
