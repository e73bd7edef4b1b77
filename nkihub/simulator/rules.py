"""Operand rules shared by many instructions (shared/hardware.md, "Access rules worth enforcing").

Each rule is a function ``(ins, program, target)`` that raises ``KernelRuleError`` naming the rule, the
operand with its shape, dtype and buffer, and the kernel line that emitted the instruction. Instruction
rows list the rules that apply to them.
"""
from __future__ import annotations

from dataclasses import dataclass

from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.program import AccessPattern, Instruction, Program


def fail(rule: str, message: str, ins: Instruction, program: Program, role: str | None = None,
         ap: AccessPattern | None = None) -> KernelRuleError:
    """Build the error for operand ``role`` of ``ins`` (pass ``ap`` when the role is ambiguous)."""
    if ap is None and role is not None:
        ap = ins.src.get(role) or ins.dst.get(role)
    spec = program.tensors[ap.tensor] if ap is not None else None
    return KernelRuleError(rule, f"{ins.opcode}: {message}", operand=role,
                           shape=ap.shape if ap is not None else None,
                           dtype=spec.dtype if spec else None, buffer=spec.buffer if spec else None,
                           loc=ins.loc, tensor=spec.label if spec else None)


def operands(ins: Instruction):
    """(role, access pattern) of every operand, destinations first."""
    yield from ins.dst.items()
    yield from ins.src.items()


def partitions(ap: AccessPattern) -> int:
    return ap.dims[0][1] if ap.dims else 1


def start_partition(ap: AccessPattern, program: Program) -> int:
    spec = program.tensors[ap.tensor]
    return ap.offset // spec.free_size


def partition_limit(ins, program, target):
    """On-chip operands span at most ``target.partitions`` partitions."""
    for role, ap in operands(ins):
        if program.tensors[ap.tensor].on_chip and partitions(ap) > target.partitions:
            raise fail("partition-dim-limit", f"the partition dim (dim 0) is {partitions(ap)}; at most "
                       f"{target.partitions} partitions", ins, program, role, ap)


def partition_step(ins, program, target):
    """The partition dim of an on-chip operand walks consecutive partitions."""
    for role, ap in operands(ins):
        spec = program.tensors[ap.tensor]
        if spec.on_chip and ap.dims and ap.dims[0][1] > 1 and ap.dims[0][0] != spec.free_size:
            raise fail("partition-step", "the partition dim must walk consecutive partitions "
                       "(a step or a partition broadcast is not an engine access pattern)",
                       ins, program, role, ap)


def engine_start_partitions(n: int) -> tuple[int, ...]:
    """Where an engine access of ``n`` partitions may start: over 64 at 0; 33-64 at 0 or 64; up to 32 at
    0, 32, 64 or 96 (the quadrant rule the ISA pages state for nc_stream_shuffle's active partitions).
    DMA queues have no such rule."""
    return (0,) if n > 64 else (0, 64) if n > 32 else (0, 32, 64, 96)


def start_partition_rule(ins, program, target):
    """Over 64 partitions start at 0; 33-64 at 0 or 64; up to 32 at 0, 32, 64 or 96."""
    for role, ap in operands(ins):
        if not program.tensors[ap.tensor].on_chip:
            continue
        n, start = partitions(ap), start_partition(ap, program)
        allowed = engine_start_partitions(n)
        if start not in allowed:
            raise fail("start-partition", f"an access of {n} partitions starts at partition {start}; "
                       f"it must start at one of {allowed}", ins, program, role, ap)


def free_size_limit(ins, program, target):
    """Free size per instruction: 64K elements in SBUF; in PSUM 16 KiB per partition (the 8 banks: 4096
    float32 or 8192 bfloat16 elements); at most 4 free dims."""
    for role, ap in operands(ins):
        spec = program.tensors[ap.tensor]
        if not spec.on_chip:
            continue
        free = ap.size // max(1, partitions(ap))
        if spec.buffer == "psum":
            item = spec.np_dtype.itemsize
            limit = target.psum_free_bytes_max // item
            if free > limit:
                raise fail("free-size-limit", f"{free} {spec.dtype} elements ({free * item} bytes) per "
                           f"partition; at most {limit} {spec.dtype} elements ({target.psum_free_bytes_max} "
                           "bytes, the 8 banks) in PSUM", ins, program, role, ap)
        elif free > target.sbuf_free_elems_max:
            raise fail("free-size-limit", f"{free} elements per partition; at most "
                       f"{target.sbuf_free_elems_max} in SBUF", ins, program, role, ap)
        if len(ap.dims) - 1 > target.max_ap_free_dims:
            raise fail("access-pattern-dims", f"{len(ap.dims) - 1} free dims; at most "
                       f"{target.max_ap_free_dims}", ins, program, role, ap)


def on_chip_operands(ins, program, target):
    """Compute engines read and write SBUF/PSUM only; HBM is reached through DMA."""
    for role, ap in operands(ins):
        spec = program.tensors[ap.tensor]
        if not spec.on_chip:
            raise fail("engine-buffer", f"the {ins.engine} engine cannot access {spec.buffer.upper()}; "
                       "load it into SBUF with nl.load or nisa.dma_copy first", ins, program, role, ap)


# GpSimd reads of PSUM kernels for a target ran with: affine_select's on_true_tile on NeuronCore-v2 (AWS's
# trn1 attention kernels mask PSUM scores with it; the v2 page states no memory type, the v3/v4 page says
# "The input on_true_tile must also be in SBUF").
GPSIMD_PSUM_READS = {("affine_select", "on_true_tile"): frozenset({"gen2"})}


def engine_buffers(ins, program, target):
    """GpSimd never touches PSUM (but see ``GPSIMD_PSUM_READS``); a two-input Vector op may not take both
    inputs from PSUM."""
    if ins.engine == "gpsimd":
        for role, ap in operands(ins):
            if target.nc_version in GPSIMD_PSUM_READS.get((ins.opcode, role), ()) and role in ins.src:
                continue
            if program.tensors[ap.tensor].buffer == "psum":
                raise fail("engine-buffer", "the GpSimd engine cannot access PSUM", ins, program, role, ap)
    if ins.engine == "vector":
        in_psum = [r for r, ap in ins.src.items() if program.tensors[ap.tensor].buffer == "psum"]
        if len(ins.src) >= 2 and len(in_psum) >= 2:
            raise fail("engine-buffer", "a two-input Vector Engine instruction may not read both inputs "
                       "from PSUM", ins, program, in_psum[1])


# Operator attributes and the table of the NKI API's common fields (nki.api.shared) each one names: ALU
# operators ("Supported Math Operators for NKI ISA"), activation functions, reduction operators. The ``op``
# of tensor_reduce and tensor_partition_reduce (a reduction) and of activate2 (its own list) is checked by
# the row's own rule.
_ALU_ATTRS = ("op0", "op1", "comp_op0", "comp_op1", "cmp_op", "dst_rmw_op")
_ACTIVATION_OPS = frozenset({"activation"})
_OWN_OP = frozenset({"tensor_reduce", "tensor_partition_reduce", "activate2"})   # rows that check their own op
# Operators that take an operand, per instruction: (operator attribute, operand role or attribute).
OPERATOR_OPERANDS = {"tensor_scalar": (("op0", "operand0"), ("op1", "operand1")),
                     "scalar_tensor_tensor": (("op0", "operand0"),),
                     "tensor_scalar_reduce": (("op0", "operand0"),),
                     "tensor_scalar_cumulative": (("op0", "imm0"),)}


def operator_kinds(ins, program, target):
    """Each operator attribute names an operator of its table (nki.api.shared): ``op``/``op0``/``op1``
    and the comparison operators are ALU operators, an activation's ``op`` an activation function,
    ``reduce_op`` a reduction operator; an operator that takes an operand has it (tensor_scalar's op1 and
    operand1 go together)."""
    from nkihub.simulator.isa import alu
    role = next(iter(ins.src), None) or next(iter(ins.dst), None)
    for key in ("op",) + _ALU_ATTRS + ("reduce_op",):
        name = ins.attrs.get(key)
        if name is None or (key == "op" and ins.opcode in _OWN_OP):
            continue
        if key == "op" and ins.opcode in _ACTIVATION_OPS:
            if name not in alu.ACTIVATIONS:
                raise fail("activation-op", f"op {name!r} is not an activation function; {ins.opcode} takes one of "
                           f"the activation functions table (nl.exp, nl.gelu, nl.copy, ...) (source: nki.api.shared)",
                           ins, program, role)
        elif key == "reduce_op":
            try:
                alu.reduce_name(name)
            except ValueError:
                raise fail("reduce-op", f"reduce_op {name!r} is not a reduction operator; use nl.add, nl.maximum, "
                           "nl.minimum, ... (source: nki.api.shared)", ins, program,
                           "reduce_res" if "reduce_res" in ins.dst else role) from None
        elif name not in alu.ALU_OPS:
            what = "an activation function" if name in alu.ACTIVATIONS else "not an operator the engines know"
            raise fail("operator-kind", f"{key} {name!r} is {what}; {ins.opcode} takes ALU operators (the Supported "
                       "Math Operators table: nl.add, nl.multiply, nl.maximum, ...; activation functions go to "
                       "nisa.activation) (source: nki.api.shared)", ins, program, role)
    for op_key, operand in OPERATOR_OPERANDS.get(ins.opcode, ()):
        if ins.attrs.get(op_key) is not None and operand not in ins.src and ins.attrs.get(operand) is None:
            raise fail("operator-operand", f"{op_key}={ins.attrs[op_key]!r} is given without {operand}; pass "
                       f"{operand} (a number or a [P, 1] tile), or leave {op_key} unset (source: "
                       f"nki.isa.{ins.opcode})", ins, program, role)


def check_partitions(ins, program, roles, broadcast: bool) -> None:
    """The operands ``roles`` (those present) span the partitions of the first; with ``broadcast`` a
    one-partition operand is accepted too. Raises ``partition-mismatch``."""
    present = [(r, ins.src.get(r) or ins.dst.get(r)) for r in roles]
    present = [(r, ap) for r, ap in present if ap is not None]
    if not present:
        return
    first_role, first = present[0]
    for role, ap in present[1:]:
        if partitions(ap) != partitions(first) and not (broadcast and partitions(ap) == 1):
            raise fail("partition-mismatch", f"spans {partitions(ap)} partitions but '{first_role}' spans "
                       f"{partitions(first)}" + ("" if broadcast else "; they must be equal"),
                       ins, program, role, ap)


def same_partitions(*roles):
    """Rule factory: the named operands span the same number of partitions."""
    def rule(ins, program, target):
        check_partitions(ins, program, roles, broadcast=True)
    rule.__doc__ = f"Operands {', '.join(roles)} span the same partitions."
    return rule


def same_free_size(dst_role: str, src_role: str):
    """Rule factory: a source has as many elements per partition as the destination (or broadcasts)."""
    def rule(ins, program, target):
        d, s = ins.dst.get(dst_role), ins.src.get(src_role)
        if d is None or s is None:
            return
        fd, fs = d.size // max(1, partitions(d)), s.size // max(1, partitions(s))
        if fs not in (fd, 1) and s.shape != d.shape:
            raise fail("shape-mismatch", f"has {fs} elements per partition but '{dst_role}' has {fd} "
                       f"(shape {d.shape})", ins, program, src_role, s)
    rule.__doc__ = f"'{src_role}' matches '{dst_role}' in elements per partition."
    return rule


def column_operand(data_role: str, *roles: str, source: str):
    """Rule factory: each of ``roles``, when a tile rather than an immediate, is a ``(data.shape[0], 1)``
    vector: as many partitions as ``data_role`` and one element per partition (``source``: the AWS page
    that states it)."""
    def rule(ins, program, target):
        data = ins.src.get(data_role)
        for role in roles:
            ap = ins.src.get(role)
            if ap is None or data is None:
                continue
            free = ap.size // max(1, partitions(ap))
            if partitions(ap) != partitions(data) or free != 1:
                raise fail("scalar-operand-shape", f"'{role}' must be a compile-time scalar or a "
                           f"(data.shape[0], 1) = ({partitions(data)}, 1) vector, one value per partition "
                           f"(source: {source})", ins, program, role, ap)
    rule.__name__ = "column_operand"
    rule.rule = "scalar-operand-shape"
    rule.roles = roles
    rule.source = source
    rule.breaking = ((128, 3), (128, 64))   # operand shapes that break it, for data (128, 64)
    rule.keeping = (128, 1)
    rule.__doc__ = (f"{', '.join(roles)}: a compile-time scalar or a ({data_role}.shape[0], 1) vector "
                    f"(source: {source}).")
    return rule


def same_shape_as(data_role: str, *roles: str, source: str):
    """Rule factory: each of ``roles`` has ``data_role``'s partitions and elements per partition, with no
    broadcasting (``source``: the AWS page that states it)."""
    def rule(ins, program, target):
        data = ins.src.get(data_role)
        for role in roles:
            ap = ins.src.get(role)
            if ap is None or data is None:
                continue
            if partitions(ap) != partitions(data) or ap.size != data.size:
                raise fail("operand-shape", f"'{role}' must have the shape of '{data_role}' "
                           f"({partitions(data)} partitions of {data.size // max(1, partitions(data))} elements; "
                           f"no broadcasting) (source: {source})", ins, program, role, ap)
    rule.__name__ = "same_shape_as"
    rule.rule = "operand-shape"
    rule.roles = roles
    rule.source = source
    rule.breaking = ((128, 1), (1, 64))     # operand shapes that break it, for data (128, 64)
    rule.keeping = (128, 64)
    rule.__doc__ = f"{', '.join(roles)}: the shape of {data_role}, no broadcasting (source: {source})."
    return rule


COMPUTE_RULES = (partition_limit, partition_step, start_partition_rule, free_size_limit, on_chip_operands,
                 engine_buffers, operator_kinds)


# -- documented constraints (issue 30) -------------------------------------------------------------------
@dataclass(frozen=True)
class Documented:
    """One operand constraint an AWS API page states, as a row rule checks it: the ``rule`` name its refusal
    carries, the operand ``roles`` it is raised for (``"*"``: any operand; a participant's ``p{i}_dst0``
    counts as ``dst``), the ``source`` page (e.g. ``"nki.isa.dma_copy"``; it may hold ``{opcode}``; None: the
    row's own ``nki.isa.<opcode>`` page) and ``what`` it says, in a sentence."""

    rule: str
    roles: tuple
    source: str | None
    what: str

    def page(self, opcode: str) -> str:
        """The AWS page stating the constraint for instruction ``opcode``."""
        return (self.source or "nki.isa.{opcode}").format(opcode=opcode)

    def fail(self, message: str, ins: Instruction, program: Program, role: str | None = None,
             ap: AccessPattern | None = None) -> KernelRuleError:
        """The refusal of ``ins`` for operand ``role``: ``message`` and the page."""
        return fail(self.rule, f"{message} (source: {self.page(ins.opcode)})", ins, program, role, ap)


def documents(*entries: Documented):
    """Decorator of a row rule ``(ins, program, target)``: the documented constraints (``Documented``) it
    checks, kept as ``rule.documents`` so the conformance tests (tests/simulator/test_rule_conformance.py,
    test_rule_conformance_data.py) give each a breaking and a keeping kernel. ``documents(*entries)(fn)``
    marks a function defined elsewhere. Rules made by ``column_operand`` and ``same_shape_as`` carry their
    own (see ``documented``)."""
    def wrap(fn):
        fn.documents = tuple(entries)
        return fn
    return wrap


def documented(fn) -> tuple:
    """The documented constraints (``Documented``) a row rule checks; () for a rule that states none."""
    if hasattr(fn, "documents"):
        return fn.documents
    if hasattr(fn, "roles"):
        return (Documented(fn.rule, tuple(fn.roles), fn.source, (fn.__doc__ or "").strip()),)
    return ()


def cited_same_partitions(*roles):
    """``same_partitions`` as a documented constraint of the row's page ("the same partition axis size" of
    every nki.isa compute page): raised as ``partition-mismatch`` for each role after the first."""
    rule = same_partitions(*roles)
    return documents(Documented("partition-mismatch", roles[1:], None,
                                      f"{', '.join(roles[1:])} span {roles[0]}'s partitions (or one)"))(rule)


def cited_same_free_size(dst_role: str, src_role: str):
    """``same_free_size`` as a documented constraint of the row's page: ``src_role`` holds ``dst_role``'s
    elements per partition (or one, broadcast), raised as ``shape-mismatch``."""
    rule = same_free_size(dst_role, src_role)
    return documents(Documented("shape-mismatch", (src_role,), None,
                                      f"{src_role} holds {dst_role}'s elements per partition"))(rule)


def operand_dtype(source: str, **allowed):
    """Rule factory: operand ``role`` has one of the dtypes ``allowed[role]`` (a page states them),
    raised as ``operand-dtype``."""
    def rule(ins, program, target):
        for role, dtypes in allowed.items():
            ap = ins.src.get(role) or ins.dst.get(role)
            if ap is not None and program.tensors[ap.tensor].dtype not in dtypes:
                raise fail("operand-dtype", f"'{role}' must be {' or '.join(sorted(dtypes))} "
                           f"(source: {source})", ins, program, role, ap)
    rule.__name__ = "operand_dtype"
    rule.allowed = dict(allowed)
    return documents(Documented("operand-dtype", tuple(allowed), source,
                                      "; ".join(f"{r}: {', '.join(sorted(d))}" for r, d in allowed.items())))(rule)


_ANY = ("*",)
_ARCH = "nki.language (NKI programming model: tiles, memory hierarchy)"
documents(Documented("partition-dim-limit", _ANY, _ARCH,
                                      "the partition dim (dim 0) of an on-chip tile is at most 128"))(partition_limit)
documents(Documented("partition-step", _ANY, _ARCH,
                                     "the partition dim walks consecutive partitions"))(partition_step)
documents(Documented("start-partition", _ANY, "nki.isa.nc_stream_shuffle",
                                           "over 64 partitions start at 0; 33-64 at 0 or 64; else a quadrant"))(start_partition_rule)
documents(Documented("free-size-limit", _ANY, _ARCH,
                                      "at most 64K elements per partition in SBUF; 16 KiB per partition in PSUM "
                                      "(4096 float32, 8192 bfloat16 elements)"),
          Documented("access-pattern-dims", _ANY, _ARCH, "at most 4 free dims in an access pattern"))(free_size_limit)
documents(Documented("engine-buffer", _ANY, _ARCH,
                                       "compute engines read and write SBUF/PSUM, not HBM"))(on_chip_operands)
documents(Documented("operator-kind", _ANY, "nki.api.shared",
                     "op/op0/op1 and comparison operators are ALU operators"),
          Documented("activation-op", _ANY, "nki.api.shared", "an activation's op is an activation function"),
          Documented("reduce-op", _ANY, "nki.api.shared", "reduce_op is a reduction operator"),
          Documented("operator-operand", _ANY, "nki.isa.{opcode}",
                     "an operator that takes an operand (op0/operand0, op1/operand1) has it"))(operator_kinds)
documents(Documented("engine-buffer", _ANY, "nki.isa.affine_select",
                                     "GpSimd does not access PSUM; a two-input Vector op reads at most one "
                                     "input from PSUM"))(engine_buffers)


def exact_partitions(*roles):
    """Rule factory: the named operands span exactly the partitions of the first (no one-partition
    broadcast: a reduction's or a per-partition result's rows are the input's rows), raised as
    ``partition-mismatch``."""
    def rule(ins, program, target):
        check_partitions(ins, program, roles, broadcast=False)
    rule.__name__ = "exact_partitions"
    return documents(Documented("partition-mismatch", roles[1:], None,
                                      f"{', '.join(roles[1:])} span exactly {roles[0]}'s partitions"))(rule)


def same_dtype(ref_role: str, role: str):
    """Rule factory: ``role`` has ``ref_role``'s dtype (a page states it), raised as ``dtype-mismatch``."""
    def rule(ins, program, target):
        a, b = ins.src.get(ref_role) or ins.dst.get(ref_role), ins.src.get(role) or ins.dst.get(role)
        if a is None or b is None:
            return
        da, db = program.tensors[a.tensor].dtype, program.tensors[b.tensor].dtype
        if da != db:
            raise fail("dtype-mismatch", f"'{role}' is {db} but '{ref_role}' is {da}; they must be equal",
                       ins, program, role, b)
    rule.__name__ = "same_dtype"
    return documents(Documented("dtype-mismatch", (role,), None, f"{role} has {ref_role}'s dtype"))(rule)


NC_NAMES = {"gen2": "NeuronCore-v2 (trn1)", "gen3": "NeuronCore-v3 (trn2)", "gen4": "NeuronCore-v4 (trn3)"}
NC_ORDER = ("gen2", "gen3", "gen4")


def target_gate(first: str, role: str | None = "dst"):
    """Rule factory: the instruction exists on NeuronCore version ``first`` (``"gen3"``, ``"gen4"``) and newer;
    on an older target it is refused as ``target-support``, naming operand ``role``. The instruction's page
    states the versions (``gate.first`` holds ``first`` for the conformance test's per-target cases)."""
    constraint = Documented("target-support", (role,) if role else (), None,
                            f"available on {NC_NAMES[first]} and newer")

    @documents(constraint)
    def gate(ins, program, target):
        if NC_ORDER.index(target.nc_version) < NC_ORDER.index(first):
            raise constraint.fail(f"{ins.opcode} is available on {NC_NAMES[first]} and newer, not on "
                                  f"{target.name}", ins, program, role)
    gate.__name__ = f"_{first}_gate"
    gate.first = first
    gate.__doc__ = f"Available on {NC_NAMES[first]} and newer."
    return gate
