"""The Program a kernel compiles to: tensors, instructions (opcode, engine, access patterns, attributes,
source location) and loops. A Program is plain data; it serialises to a versioned JSON file and hashes to
a stable key.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nkihub.simulator.dtypes import as_dtype
from nkihub.simulator.errors import SourceLoc

FORMAT = "nkihub-program"
FORMAT_VERSION = 1

HBM_BUFFERS = frozenset({"hbm", "shared_hbm", "private_hbm"})
ON_CHIP_BUFFERS = frozenset({"sbuf", "psum"})


_BINDING = re.compile(r"\s*([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)")


def bound_name(line: str) -> str | None:
    """The variable a source line assigns to (``y_t = nl.load(y)`` -> ``y_t``; an annotated assignment
    too), or None when the line binds no single name (a call statement, tuple unpacking, subscript)."""
    m = _BINDING.match(line or "")
    # ``dst=o,`` is a keyword argument on a continuation line of a call, not a binding
    return m.group(1) if m and not line.rstrip().endswith((",", "(")) else None


@dataclass
class TensorSpec:
    """A tensor of a Program.

    ``shape`` is logical; for on-chip tensors dim 0 is the partition dim and the storage is
    ``shape[0]`` partitions of ``prod(shape[1:])`` elements. ``address`` is the byte offset inside each
    partition, set by allocation (on-chip only). ``data`` holds the bytes of a constant tensor.
    ``core`` is the program instance (core) of a multi-core launch whose SBUF/PSUM holds an on-chip tensor.
    ``alias_of`` names the tensor whose storage this one reinterprets as another dtype (``.view(dtype)``,
    ``.ap(dtype=...)``): all of it, byte for byte, with the same partitions on chip; an alias has no
    storage, address or live range of its own.
    ``block_bytes``: an on-chip tensor declared with block dims ahead of its partition dim (the old
    dialect's ``nl.ndarray((n, nl.par_dim(128), 512), ...)``) is a row of blocks of this many bytes per
    partition, each allocated for its own live range at ``block_addresses[b]`` (``address`` is block 0's).
    ``pinned``: the kernel chose ``address`` (direct allocation); the allocator keeps it and places the
    other tensors around it.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: str
    kind: str = "internal"        # input | output | internal | constant
    loc: SourceLoc | None = None
    address: int | None = None
    data: bytes | None = None
    alias_of: str | None = None
    block_bytes: int | None = None
    block_addresses: tuple[int, ...] | None = None
    core: int = 0
    pinned: bool = False

    @property
    def blocks(self) -> int:
        """Blocks allocated separately (1 for an ordinary tensor)."""
        return self.bytes_per_partition // self.block_bytes if self.block_bytes else 1

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def label(self) -> str:
        """The tensor as its author knows it: a kernel parameter by its name (``'x'``), a tile or tensor
        by the variable its source line bound it to beside our name (``'y_t' (sbuf_1)``), else our name."""
        var = bound_name(self.loc.text) if self.loc is not None and self.kind != "input" else None
        return f"'{var}' ({self.name})" if var and var != self.name else f"'{self.name}'"

    @property
    def np_dtype(self) -> np.dtype:
        return as_dtype(self.dtype)

    @property
    def on_chip(self) -> bool:
        return self.buffer in ON_CHIP_BUFFERS

    @property
    def free_size(self) -> int:
        """Elements per partition (on-chip tensors)."""
        return math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    @property
    def bytes_per_partition(self) -> int:
        return self.free_size * self.np_dtype.itemsize

    def to_json(self) -> dict:
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "buffer": self.buffer,
             "kind": self.kind, "loc": self.loc.to_json() if self.loc else None, "address": self.address}
        if self.data is not None:
            d["data"] = base64.b64encode(self.data).decode()
        if self.alias_of is not None:
            d["alias_of"] = self.alias_of
        if self.block_bytes is not None:
            d["block_bytes"] = self.block_bytes
            d["block_addresses"] = None if self.block_addresses is None else list(self.block_addresses)
        if self.core:
            d["core"] = self.core
        if self.pinned:
            d["pinned"] = True
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TensorSpec":
        data = base64.b64decode(d["data"]) if d.get("data") is not None else None
        blocks = d.get("block_addresses")
        return cls(d["name"], tuple(d["shape"]), d["dtype"], d["buffer"], d.get("kind", "internal"),
                   SourceLoc.from_json(d.get("loc")), d.get("address"), data, d.get("alias_of"),
                   d.get("block_bytes"), None if blocks is None else tuple(blocks), d.get("core", 0),
                   d.get("pinned", False))


@dataclass(frozen=True)
class AccessPattern:
    """A strided view of a tensor's storage: ``offset`` plus ``(stride, size)`` per dim, in elements.

    For on-chip tensors dims[0] walks partitions (its stride is a multiple of the free size).
    """

    tensor: str
    offset: int
    dims: tuple[tuple[int, int], ...]

    @functools.cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.dims)

    @functools.cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @functools.cached_property
    def free_span(self) -> int:
        """Elements per partition from the first to the last one touched: 1 + sum of stride x (size - 1)
        over the free dims (asked for many times per access pattern while planning)."""
        return 1 + sum(s * (n - 1) for s, n in self.dims[1:])

    def extent(self) -> tuple[int, int]:
        """Lowest and one-past-highest flat element index touched."""
        lo = hi = self.offset
        for stride, size in self.dims:
            if size == 0:
                return self.offset, self.offset
            span = stride * (size - 1)
            if span >= 0:
                hi += span
            else:
                lo += span
        return lo, hi + 1

    def box(self, row_len: int) -> tuple[int, int, int, int]:
        """(row_lo, row_hi, col_lo, col_hi), in elements, of a box covering this pattern over a
        [rows, row_len] storage: rows are partitions on chip (the leading dims in HBM), columns offsets
        inside a row. Exact for one row or patterns that stay inside their rows, else whole rows."""
        lo, hi = self.extent()
        if hi <= lo:
            return 0, 0, 0, 0
        r0, r1 = lo // row_len, (hi - 1) // row_len + 1
        c_lo = c_hi = self.offset % row_len
        for stride, size in self.dims:
            if size <= 1 or stride % row_len == 0:
                continue
            span = stride * (size - 1)
            if span > 0:
                c_hi += span
            else:
                c_lo += span
        if r1 - r0 == 1:
            return r0, r1, lo - r0 * row_len, hi - r0 * row_len
        if c_lo >= 0 and c_hi < row_len:
            return r0, r1, c_lo, c_hi + 1
        return r0, r1, 0, row_len

    @classmethod
    def row_major(cls, tensor: str, shape, offset: int = 0) -> "AccessPattern":
        """The contiguous row-major pattern of ``shape`` starting at element ``offset``."""
        dims, stride = [], 1
        for size in reversed(tuple(shape)):
            dims.append((stride, int(size)))
            stride *= int(size)
        return cls(tensor, offset, tuple(reversed(dims)))

    def to_json(self) -> list:
        return [self.tensor, self.offset, [list(d) for d in self.dims]]

    @classmethod
    def from_json(cls, d: list) -> "AccessPattern":
        return cls(d[0], d[1], tuple((int(a), int(b)) for a, b in d[2]))


@dataclass
class Instruction:
    """One engine instruction. ``dst``/``src`` map operand roles to access patterns; ``attrs`` holds
    JSON-able scalars (op names, immediates, flags); ``loops`` is the (loop id, iteration) stack it was
    emitted under, outermost first."""

    opcode: str
    engine: str
    dst: dict[str, AccessPattern]
    src: dict[str, AccessPattern]
    attrs: dict = field(default_factory=dict)
    loc: SourceLoc | None = None
    loops: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict:
        return {"op": self.opcode, "engine": self.engine,
                "dst": {k: v.to_json() for k, v in self.dst.items()},
                "src": {k: v.to_json() for k, v in self.src.items()},
                "attrs": self.attrs, "loc": self.loc.to_json() if self.loc else None,
                "loops": [list(x) for x in self.loops]}

    @classmethod
    def from_json(cls, d: dict) -> "Instruction":
        return cls(d["op"], d["engine"], {k: AccessPattern.from_json(v) for k, v in d["dst"].items()},
                   {k: AccessPattern.from_json(v) for k, v in d["src"].items()}, d.get("attrs", {}),
                   SourceLoc.from_json(d.get("loc")), tuple(tuple(x) for x in d.get("loops", ())))


@dataclass(frozen=True)
class LoopInfo:
    """A traced loop: ``kind`` is affine, sequential or static; ``trip_count`` iterations."""

    id: int
    kind: str
    trip_count: int
    loc: SourceLoc | None = None

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "trip_count": self.trip_count,
                "loc": self.loc.to_json() if self.loc else None}

    @classmethod
    def from_json(cls, d: dict) -> "LoopInfo":
        return cls(d["id"], d["kind"], d["trip_count"], SourceLoc.from_json(d.get("loc")))


@dataclass
class Program:
    """A kernel traced for concrete shapes: the unit that is validated, allocated, executed, costed,
    cached and shipped."""

    name: str
    tensors: dict[str, TensorSpec] = field(default_factory=dict)
    instructions: list[Instruction] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    loops: dict[int, LoopInfo] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def add_tensor(self, spec: TensorSpec) -> TensorSpec:
        if spec.name in self.tensors:
            raise ValueError(f"tensor {spec.name!r} already exists in program {self.name!r}")
        self.tensors[spec.name] = spec
        return spec

    # -- serialisation -------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"format": FORMAT, "version": FORMAT_VERSION, "name": self.name,
                "tensors": [t.to_json() for t in self.tensors.values()],
                "instructions": [i.to_json() for i in self.instructions],
                "inputs": self.inputs, "outputs": self.outputs,
                "loops": [lp.to_json() for lp in self.loops.values()], "meta": self.meta}

    @classmethod
    def from_json(cls, d: dict) -> "Program":
        if d.get("format") != FORMAT:
            raise ValueError(f"not an nkihub program file (format {d.get('format')!r})")
        if d.get("version") != FORMAT_VERSION:
            raise ValueError(f"program file version {d.get('version')} is not supported "
                             f"(this nkihub reads version {FORMAT_VERSION}); recompile the kernel")
        tensors = [TensorSpec.from_json(t) for t in d["tensors"]]
        return cls(d["name"], {t.name: t for t in tensors},
                   [Instruction.from_json(i) for i in d["instructions"]], list(d["inputs"]),
                   list(d["outputs"]), {lp["id"]: LoopInfo.from_json(lp) for lp in d["loops"]},
                   d.get("meta", {}))

    def dumps(self) -> str:
        """Canonical JSON text (sorted keys, no spaces): the artifact and the input of ``digest``."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> "Program":
        return cls.from_json(json.loads(text))

    def save(self, path: "str | Path") -> Path:
        """Write the artifact atomically (temp file then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{id(self)}")
        tmp.write_text(self.dumps())
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: "str | Path") -> "Program":
        return cls.loads(Path(path).read_text())

    def digest(self) -> str:
        """sha256 of the canonical JSON: equal programs hash equal across processes and machines."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()

    # -- helpers --------------------------------------------------------------------------------------
    def tensor_of(self, ap: AccessPattern) -> TensorSpec:
        return self.tensors[ap.tensor]

    def root(self, name: str) -> TensorSpec:
        """The tensor owning the storage of ``name`` (itself unless it is an alias)."""
        spec = self.tensors[name]
        while spec.alias_of is not None:
            spec = self.tensors[spec.alias_of]
        return spec

    def add_alias(self, base: str, dtype: str, name: str) -> TensorSpec:
        """A tensor reinterpreting all of ``base``'s storage as ``dtype`` (same partitions on chip). The
        bytes per partition (on chip) or in all (HBM) must be a whole number of ``dtype`` elements."""
        root = self.root(base)
        item = as_dtype(dtype).itemsize
        rows = root.shape[0] if root.on_chip and root.shape else 1
        row_bytes = root.size * root.np_dtype.itemsize // max(1, rows)
        if row_bytes % item:
            raise ValueError(f"{row_bytes} bytes {'per partition ' if root.on_chip else ''}of '{root.name}' "
                             f"are not a whole number of {dtype} elements ({item} bytes)")
        for spec in self.tensors.values():
            if spec.alias_of == root.name and spec.dtype == dtype:
                return spec
        shape = (rows, row_bytes // item) if root.on_chip else (row_bytes // item,)
        return self.add_tensor(TensorSpec(name, shape, dtype, root.buffer, "alias", root.loc, alias_of=root.name,
                                          core=root.core))

    def summary(self) -> str:
        """One line: name, instruction count per engine."""
        counts: dict[str, int] = {}
        for ins in self.instructions:
            counts[ins.engine] = counts.get(ins.engine, 0) + 1
        per = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        return f"Program {self.name}: {len(self.instructions)} instructions ({per}), {len(self.tensors)} tensors"
