"""A kernel with tuning parameters for the autotuner's tests (imported by file, as ``nkihub tune`` does):
``tile`` rows per load (over 128 breaks the partition rule), ``skip`` skips the multiply (faster, and
wrong), ``unroll`` changes nothing (a large space for the TPE search)."""
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


def ref(x):
    return x * 2


def wrong_ref(x):
    return x * 3


@nki.autotune(space={"tile": [32, 64, 128, 256], "skip": [False, True]}, key=["x"], target=("trn1", "trn2"),
              check=ref, workers=1)
@nki.jit
def tuned_scale(x, tile=128, skip=False):
    return tiled_scale(x, tile=tile, skip=skip)
