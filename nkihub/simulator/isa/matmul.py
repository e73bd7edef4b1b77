"""Tensor Engine instructions: nc_matmul and nc_transpose (Tensor or Vector engine)."""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.convert import F32, caster
from nkihub.simulator.isa.base import ACCUMULATE, MATMUL, f32, register, store
from nkihub.simulator.isa.fast import NoBind, reader, refresher, strict_reshape, understands
from nkihub.simulator.rules import COMPUTE_RULES, Documented, documents, fail, partitions

MATMUL_IN_DTYPES = frozenset({"float8_e4m3", "float8_e5m2", "float8_e4m3fn", "bfloat16", "float16",
                              "float32"})


def _free(ap) -> int:
    return ap.size // max(1, partitions(ap))


FP8 = frozenset({"float8_e4m3", "float8_e5m2", "float8_e4m3fn"})


def double_row(ins) -> bool:
    """FP8 double-row mode: two contraction rows per partition (operands [K, 2, F])."""
    return ins.attrs.get("perf_mode") in ("double_row", "double_row_gen3")


def _double_row_rules(ins, program, target):
    """The matmul_perf_mode page: "Double FP8 mode ... by packing two FP8 weight/ifmap element pairs",
    on NeuronCore-v3 and newer; operands [K, 2, M] and [K, 2, N]."""
    if not target.fp8_double_row:
        raise fail("matmul-perf-mode", f"double_row performance mode needs NeuronCore-v3 or newer, not "
                   f"{target.name}", ins, program, "moving")
    for role in ("stationary", "moving"):
        ap = ins.src[role]
        if program.tensor_of(ap).dtype not in FP8:
            raise fail("matmul-perf-mode", "double_row performance mode takes fp8 inputs", ins, program, role)
        if len(ap.shape) < 3 or ap.shape[1] != 2:
            raise fail("matmul-perf-mode", f"double_row operands hold two rows per partition: shape [K, 2, F], "
                       f"got {ap.shape}", ins, program, role)


def _tiling_rules(ins, program, target):
    """Tensor Engine tiling mode: ``tile_size`` (row, column) of 128, 64 or (NeuronCore-v3+) 32; the
    stationary tile fits it; ``tile_position`` (start_row, start_column) multiples of the sizes below 128;
    double_row is not combined with column tiling."""
    size, pos = ins.attrs.get("tile_size") or [], ins.attrs.get("tile_position") or []
    if not size and not pos:
        return
    if not (len(size) == 2 and len(pos) == 2):
        raise fail("matmul-tiling", "tile_position and tile_size must both be set (two values each) to enable "
                   "tiling mode", ins, program, "stationary")
    if not all(isinstance(v, int) for v in (*size, *pos)):
        return   # affine expressions: checked where they resolve
    ok = (32, 64, 128) if target.nc_version != "gen2" else (64, 128)
    st = ins.src["stationary"]
    pair = 2 if double_row(ins) else 1
    if size[0] not in ok or size[1] not in ok:
        raise fail("matmul-tiling", f"tile_size {tuple(size)}: row and column sizes are one of {ok} on "
                   f"{target.name}", ins, program, "stationary")
    if partitions(st) > size[0] or _free(st) // pair > size[1]:
        raise fail("matmul-tiling", f"the stationary tile [{partitions(st)}, {_free(st) // pair}] exceeds "
                   f"tile_size {tuple(size)}", ins, program, "stationary")
    if pos[0] % size[0] or pos[1] % size[1] or not (0 <= pos[0] < 128 and 0 <= pos[1] < 128):
        raise fail("matmul-tiling", f"tile_position {tuple(pos)} must be multiples of tile_size {tuple(size)} "
                   "below 128", ins, program, "stationary")
    if pair == 2 and size[1] != 128:
        raise fail("matmul-tiling", "double_row performance mode cannot be combined with column tiling",
                   ins, program, "stationary")


def _matmul_rules(ins, program, target):
    st, mv, dst = ins.src["stationary"], ins.src["moving"], ins.dst["dst"]
    for role in ("stationary", "moving"):
        spec = program.tensor_of(ins.src[role])
        if spec.buffer != "sbuf":
            raise fail("matmul-buffer", "Tensor Engine inputs must be in SBUF", ins, program, role)
        if spec.dtype not in MATMUL_IN_DTYPES:
            raise fail("matmul-dtype", f"Tensor Engine inputs must be one of "
                       f"{', '.join(sorted(MATMUL_IN_DTYPES))}", ins, program, role)
    dspec = program.tensor_of(dst)
    if dspec.buffer != "psum":
        raise fail("matmul-buffer", "the matmul output must be a PSUM tile", ins, program, "dst")
    ok_out = {"float32", "bfloat16"} if target.psum_bf16_allowed else {"float32"}
    if dspec.dtype not in ok_out:
        raise fail("matmul-dtype", f"the matmul output in PSUM must be {' or '.join(sorted(ok_out))} on "
                   f"{target.name}", ins, program, "dst")
    fp32 = {program.tensor_of(st).dtype == "float32", program.tensor_of(mv).dtype == "float32"}
    if len(fp32) == 2:
        raise fail("matmul-dtype", "if one matmul input is float32 the other must be float32 too",
                   ins, program, "moving")
    pair = 2 if double_row(ins) else 1
    if pair == 2:
        _double_row_rules(ins, program, target)
    if partitions(st) != partitions(mv):
        raise fail("matmul-contraction", f"the contraction (partition) dims differ: stationary has "
                   f"{partitions(st)}, moving has {partitions(mv)}", ins, program, "moving")
    if _free(st) // pair > target.stationary_fmax:
        raise fail("matmul-stationary-size", f"the stationary free size is {_free(st) // pair}; at most "
                   f"{target.stationary_fmax}", ins, program, "stationary")
    moving_max = target.moving_fmax_fp32 if dspec.dtype == "float32" else 2 * target.moving_fmax_fp32
    moving_max = max(target.moving_fmax, moving_max) if target.psum_bf16_allowed else target.moving_fmax
    if _free(mv) // pair > moving_max:
        raise fail("matmul-moving-size", f"the moving free size is {_free(mv) // pair}; at most {moving_max}",
                   ins, program, "moving")
    if partitions(dst) != _free(st) // pair or _free(dst) != _free(mv) // pair:
        raise fail("matmul-output-shape", f"the output must be [{_free(st) // pair}, {_free(mv) // pair}] "
                   "(stationary free x moving free)", ins, program, "dst")
    # One accumulation group lives in one PSUM bank (v2/v3; v4 may span all banks).
    if not target.psum_bf16_allowed:
        item = dspec.np_dtype.itemsize
        lo, hi = dst.extent()
        first = (lo % dspec.free_size) * item
        last = ((hi - 1) % dspec.free_size) * item
        if first // target.psum_bank_bytes != last // target.psum_bank_bytes:
            raise fail("psum-bank", f"the matmul output spans bytes {first}..{last} of each partition, "
                       f"crossing a {target.psum_bank_bytes}-byte PSUM bank", ins, program, "dst")


def _matmul(ins, src, dst, ctx):
    """dst = stationary.T @ moving on the Tensor Engine: inputs from SBUF, fp32 accumulation in PSUM.
    With ``accumulate`` the product is added to the PSUM contents, else it overwrites them."""
    st, mv, out = src["stationary"], src["moving"], dst["dst"]
    k = st.shape[0] * (2 if double_row(ins) else 1)   # double_row: rows (partition, pair) are contracted
    res = f32(st).reshape(k, -1).T @ f32(mv).reshape(k, -1)
    if ins.attrs.get("accumulate"):
        res = f32(out).reshape(res.shape) + res
    store(out, res.reshape(out.shape))


# Attributes of nc_matmul; the numerics depend on ``accumulate`` only (the rest is placement and cost).
MATMUL_ATTRS = ("accumulate", "is_stationary_onezero", "is_moving_onezero", "is_transpose", "perf_mode",
                "tile_position", "tile_size")


def _matmul_bind(ins, src, dst, sc):
    """``_matmul`` for k stacked matmuls: one np.matmul over the stack (numpy runs one BLAS GEMM per
    matrix, with the strides and transposition flags each single matmul would pass)."""
    understands(ins, *MATMUL_ATTRS)
    if double_row(ins):
        raise NoBind("double_row: two contraction rows per partition")
    st, mv, out = src["stationary"], src["moving"], dst["dst"]
    if out.dtype != F32:
        raise NoBind("a bf16 PSUM output")
    k, n = st.shape[1], st.shape[0]
    a_arr, a_ref = reader(st, sc, 0)
    b_arr, b_ref = reader(mv, sc, 1)
    shape = (n, a_arr[0].size // k, b_arr[0].size // k)
    o = strict_reshape(out, shape)
    accumulate = bool(ins.attrs.get("accumulate"))
    # A product that overwrites its destination goes straight into it when BLAS can write it (gemm's
    # result does not depend on its leading dimension); an accumulated one needs the product first.
    res = o if not accumulate and _blas_writable(o) else sc.new(shape, F32, 2)
    refresh = refresher(a_ref, b_ref)
    # f32(x).reshape(k, -1) may copy (an fp32 operand with free dims that do not flatten): then it is a
    # C-ordered copy per call, as in _matmul.
    a_get, b_get = _flat(a_arr, k), _flat(b_arr, k)
    if shape[1] == 1 or shape[2] == 1:
        a_get = _reference_rows(a_get, st.dtype, ins.src["stationary"], k, sc, 3)
        b_get = _reference_rows(b_get, mv.dtype, ins.src["moving"], k, sc, 4)

    def step(ctx):
        if refresh is not None:
            refresh()
        np.matmul(a_get().transpose(0, 2, 1), b_get(), out=res)
        if accumulate:
            np.add(o, res, out=o)
        elif res is not o:
            np.copyto(o, res)
    return step


def _reference_rows(get, dtype, ap, k: int, sc, slot: int):
    """``get`` for an operand of a matrix-vector product, whose sums BLAS's gemv kernels order by the
    matrix's row stride (unlike gemm's): an fp32 operand the reference reads in place is copied, each
    call, into a work array with the reference's row stride when the fast engine's storage packs its
    rows closer (renamed storage keeps partitions back to back). A widened operand is packed in both."""
    if dtype != F32:
        return get
    ref = np.lib.stride_tricks.as_strided(np.empty(1, F32), ap.shape, tuple(s * F32.itemsize for s, _ in ap.dims))
    try:
        rows = strict_reshape(ref, (k, ref.size // k)).strides
    except NoBind:      # the reference's reshape copies into a packed array, as _flat does
        return get
    have = get()
    if have.strides[1:] == rows or min(rows) <= 0:
        return get
    n, m = have.shape[0], have.shape[2]
    span = ((k - 1) * rows[0] + (m - 1) * rows[1]) // F32.itemsize + 1
    work = np.ndarray((n, k, m), F32, sc.new((n * span,), F32, slot), 0, (span * F32.itemsize, *rows))

    def copied():
        np.copyto(work, get())
        return work
    return copied


def _blas_writable(o: np.ndarray) -> bool:
    """Whether numpy's matmul hands the [n, M, N] fp32 ``o`` to BLAS as its output as it is: unit column
    stride, rows at least N apart (numpy's "blasable" test), and a matrix rather than a vector (gemv
    kernels are chosen by stride)."""
    _, m, n = o.shape
    row, col = o.strides[1:]
    return m > 1 and n > 1 and col == o.itemsize and row % o.itemsize == 0 and row // o.itemsize >= n


def _flat(a: np.ndarray, k: int):
    n = a.shape[0]
    try:
        v = strict_reshape(a, (n, k, a[0].size // k))
        return lambda: v
    except NoBind:
        return lambda: np.stack([m.reshape(k, -1) for m in a])


def _matmul_cost(ins, program, target):
    st, mv = ins.src["stationary"], ins.src["moving"]
    fp32 = program.tensor_of(st).dtype == "float32" and not ins.attrs.get("is_stationary_onezero")
    double = ins.attrs.get("perf_mode") == "double_row" and target.fp8_double_row
    # The stationary operand is loaded in the background (LoadStationary, assumed hidden): only the moving
    # operand's and the output's strides slow the streaming phase.
    n = _free(mv) * cr.stride_slowdown(ins, program, roles=("moving", "dst"))
    return cr.seconds(cr.matmul_cycles(n, fp32=fp32, double_row=double, n_stationary=_free(st)), target, "tensor")


documents(_matmul_rules,
          Documented("matmul-buffer", ("stationary", "moving", "dst"), None,
                     "stationary and moving in SBUF; the result in PSUM"),
          Documented("matmul-dtype", ("stationary", "moving", "dst"), None,
                     "inputs fp8/bf16/fp16/fp32 (fp32 only with fp32); the PSUM result fp32 (bf16 on trn3)"),
          Documented("matmul-contraction", ("moving",), None, "stationary and moving share the partition "
                     "(contraction) dim"),
          Documented("matmul-stationary-size", ("stationary",), None, "stationary free size at most 128"),
          Documented("matmul-moving-size", ("moving",), None, "moving free size at most 512"),
          Documented("matmul-output-shape", ("dst",), None, "dst is [stationary free, moving free]"),
          Documented("psum-bank", ("dst",), "nki.isa.nc_matmul (PSUM accumulation group: one 2 KiB bank)",
                     "one matmul output stays in one PSUM bank (trn1, trn2)"),
          Documented("matmul-perf-mode", ("stationary", "moving"), "nki.isa.matmul_perf_mode",
                     "double_row: NeuronCore-v3+, fp8 operands [K, 2, F]"))


register("nc_matmul", engines={"tensor"}, execute=_matmul, cost=_matmul_cost, bind=_matmul_bind,
         # The matmul rules first: their messages (e.g. the stationary free size) say more than the
         # generic partition limit the same mistake would also break.
         rules=(_matmul_rules, _tiling_rules) + COMPUTE_RULES, categories={MATMUL, ACCUMULATE},
         reads_dst=lambda ins: bool(ins.attrs.get("accumulate")), widens=lambda ins: ("stationary", "moving"))


def _transpose_rules(ins, program, target):
    data, dst = ins.src["data"], ins.dst["dst"]
    p, f = partitions(data), _free(data)
    if partitions(dst) != f or _free(dst) != p:
        raise fail("transpose-shape", f"the output must be [{f}, {p}] for an input of [{p}, {f}]",
                   ins, program, "dst")
    if ins.engine == "tensor":
        if program.tensor_of(data).buffer != "sbuf":
            raise fail("transpose-buffer", "a Tensor Engine transpose reads SBUF", ins, program, "data")
        if program.tensor_of(dst).buffer != "psum":
            raise fail("transpose-buffer", "a Tensor Engine transpose writes PSUM", ins, program, "dst")
        if f > target.partitions:
            raise fail("transpose-size", f"free size {f} exceeds {target.partitions}", ins, program, "data")
    elif max(p, f) > target.vector_transpose_max:
        raise fail("transpose-size", f"the Vector Engine transposes at most {target.vector_transpose_max}x"
                   f"{target.vector_transpose_max}; got [{p}, {f}]", ins, program, "data")


def _transpose(ins, src, dst, ctx):
    """dst[f, p] = data[p, f]: on the Tensor Engine (via the identity, into PSUM) or on the Vector Engine
    (blocks up to 32x32)."""
    data = src["data"]
    out = dst["dst"]
    store(out, f32(data).reshape(data.shape[0], -1).T.reshape(out.shape))


def _transpose_bind(ins, src, dst, sc):
    """``_transpose`` on stacked operands: one conversion-copy through a transposed view."""
    understands(ins)
    data, out = src["data"], dst["dst"]
    n, p = data.shape[0], data.shape[1]
    if data.dtype != F32 and out.dtype != F32 or out.dtype.kind in "iub":
        raise NoBind("no fp32 side")
    t = strict_reshape(data, (n, p, data[0].size // max(p, 1))).transpose(0, 2, 1)
    o = strict_reshape(out, t.shape)
    cast = caster(o, t)
    return lambda ctx: cast()


def _transpose_cost(ins, program, target):
    data, slow = ins.src["data"], cr.stride_slowdown(ins, program)
    # max(P, min(64, F)) has no fixed part: a strided operand slows all of it.
    if ins.engine == "tensor":
        return cr.seconds(slow * cr.pe_transpose_cycles(partitions(data), _free(data)), target, "tensor")
    return cr.seconds(cr.vector_cycles(_free(data) * slow), target, "vector")


documents(_tiling_rules, Documented("matmul-tiling", ("stationary",), None,
                                    "tile_size rows/columns of 128, 64 or (v3+) 32, the stationary tile fits; "
                                    "tile_position multiples of it; no double_row with column tiling"))


documents(_transpose_rules,
          Documented("transpose-shape", ("dst",), None, "dst is [data free, data partitions]"),
          Documented("transpose-buffer", ("data", "dst"), None,
                     "on the Tensor Engine data is in SBUF and dst in PSUM"),
          Documented("transpose-size", ("data",), None,
                     "the Vector Engine transposes at most 32x32; the Tensor Engine at most 128 free"))


register("nc_transpose", engines={"tensor", "vector"}, execute=_transpose, cost=_transpose_cost,
         bind=_transpose_bind, moves=lambda ins: None if ins.attrs else "data",
         rules=COMPUTE_RULES + (_transpose_rules,), categories={MATMUL})
