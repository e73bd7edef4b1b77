"""The emulated ``neuron`` backend: one boxed fallback for every aten op on PrivateUse1.

Three kinds of op reach it (an op with only a composite kernel never does: that kernel decomposes it into
the ops below; an op with both a composite and a CPU kernel is registered to it directly, so it runs the
CPU's kernel, and aten's "overrideable" convolutions run as the CPU's ``convolution``):

- **metadata ops** (views such as ``view``/``as_strided``, in-place views such as ``transpose_``, and
  ``set_``) run the CPU kernel on the neuron tensors themselves (a redispatch to the CPU key): those
  kernels only touch sizes, strides and the storage pointer, so the result is a neuron tensor sharing
  the input's storage, exactly as a view on a real device does;
- **compute ops** run on host views (:mod:`nkihub.device.host`) of their neuron arguments with the CPU
  kernel; in-place and ``out=`` results are the caller's own neuron tensors (the CPU kernel wrote their
  memory), fresh results become neuron tensors on the device of the inputs, counted as allocated;
- **a few special ops** a device must implement itself: ``_copy_from`` (every copy between devices),
  ``_copy_from_and_resize``, ``resize_`` (a new storage when it grows), ``set_()``, ``record_stream``.

Random ops draw from the emulated core's generator (``torch.neuron.manual_seed``), not the CPU's.
Mixing a neuron tensor with a CPU tensor that is not a 0-dim scalar is an error, as on a real device,
so device bugs in the code under test show up here rather than on the first Trainium run.
"""
from __future__ import annotations

import atexit
import math
import threading
import time

import torch

from .host import to_host, to_neuron

NAME = "neuron"
_CPU = torch.device("cpu")
_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_aten = torch.ops.aten
# ops that take CPU tensors beside device tensors on real devices too (copies, CPU index tensors)
_MIXED_OK = {"aten::_copy_from", "aten::_copy_from_and_resize", "aten::copy_", "aten::index",
             "aten::index_put", "aten::index_put_", "aten::_index_put_impl_", "aten::_to_copy"}

_state = None   # the emulation's State (set by install)


class _Plan:
    """What the fallback does with one OpOverload, worked out once from its schema and tags."""

    __slots__ = ("kind", "random", "generator", "outs", "mixed_ok")

    def __init__(self, op):
        schema = op._schema
        self.kind = ("special" if op in _SPECIAL else
                     "meta" if op.is_view or torch.Tag.inplace_view in op.tags or schema.name == "aten::set_"
                     else "compute")
        self.random = torch.Tag.nondeterministic_seeded in op.tags
        names = [a.name for a in schema.arguments]
        self.generator = names.index("generator") if "generator" in names else None
        self.outs = tuple((i, a.name) for i, a in enumerate(schema.arguments)
                          if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
        self.mixed_ok = schema.name in _MIXED_OK


_PLANS: dict = {}
_MAIN_THREAD = threading.main_thread().ident
_off_main = []


def _ran_off_the_main_thread() -> None:
    """Autograd runs a device's backward on a thread of its own, which may drop its last reference to the
    graph task (and a Python object the task holds) an instant after ``backward()`` returned: if Python is
    already finalising, that thread is killed mid-C++ and the process aborts. Once such a thread has run
    an op, give it that instant at exit."""
    _off_main.append(True)
    atexit.register(time.sleep, 0.05)


def fallback(op, *args, **kwargs):
    """The PrivateUse1 kernel of every aten op without one of its own."""
    if threading.get_ident() != _MAIN_THREAD and not _off_main:
        _ran_off_the_main_thread()
    plan = _PLANS.get(op)
    if plan is None:
        plan = _PLANS[op] = _Plan(op)
    if plan.kind == "special":
        return _SPECIAL[op](op, *args, **kwargs)
    if plan.kind == "meta":
        try:
            return op.redispatch(_CPU_KEYS, *args, **kwargs)
        except NotImplementedError:   # no CPU kernel to borrow: compute it, the result sharing memory
            pass
    return _compute(op, plan, args, kwargs)


# -- compute ops --------------------------------------------------------------------------------------
class _Call:
    """Moves one op call's arguments to host views and its results back to the neuron device."""

    __slots__ = ("hosts", "index", "cpu_tensor")

    def __init__(self):
        self.hosts: list = []          # (host view, neuron tensor)
        self.index = None              # device index of the first neuron tensor argument
        self.cpu_tensor = None         # a CPU tensor argument that is not a 0-dim scalar

    def down(self, a):
        if isinstance(a, torch.Tensor):
            kind = a.device.type
            if kind == NAME:
                if self.index is None:
                    self.index = a.device.index
                h = to_host(a)
                self.hosts.append((h, a))
                return h
            if kind == "cpu" and a.dim() and self.cpu_tensor is None:
                self.cpu_tensor = a
            return a
        if isinstance(a, (list, tuple)) and a and any(isinstance(x, torch.Tensor) for x in a):
            return type(a)(self.down(x) for x in a)
        if isinstance(a, torch.device) and a.type == NAME:
            return _CPU
        return a

    def neuron_of(self, h):
        for host, n in self.hosts:
            if host is h:
                return n
        return None

    def up(self, o, index: int):
        if isinstance(o, torch.Tensor):
            n = self.neuron_of(o)
            if n is not None:
                return n
            n = to_neuron(o, index)
            if not self._aliases_input(o):
                _state.allocated(n.untyped_storage(), index)
            return n
        if isinstance(o, (list, tuple)):
            return type(o)(self.up(x, index) for x in o)
        return o

    def _aliases_input(self, o) -> bool:
        if not self.hosts or not o.numel():
            return False
        ptr = o.data_ptr()
        for _, n in self.hosts:
            s = n.untyped_storage()
            if s.data_ptr() <= ptr < s.data_ptr() + s.nbytes():
                return True
        return False


def _target(call: _Call, kwargs) -> torch.device | None:
    """The device fresh results go to: the op's ``device=`` argument, else the neuron inputs' device;
    None when results stay on the CPU."""
    dev = kwargs.get("device")
    if dev is not None:
        dev = torch.device(dev)
        if dev.type != NAME:
            return None
        return torch.device(NAME, _state.index(dev))
    return torch.device(NAME, _state.current if call.index is None else call.index)


def _compute(op, plan: _Plan, args, kwargs):
    call = _Call()
    hargs = tuple(call.down(a) for a in args)
    hkwargs = {k: call.down(v) for k, v in kwargs.items()}
    target = _target(call, kwargs)
    if call.hosts and call.cpu_tensor is not None and not plan.mixed_ok:
        n = call.hosts[0][1]
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {n.device} and "
            f"cpu! (in {op._schema.name}; the emulated neuron device checks this as a real one does)")
    if plan.random:
        return _seeded(op, plan, call, hargs, hkwargs, target)
    return _run(op, plan, call, hargs, hkwargs, target)


def _run(op, plan, call, hargs, hkwargs, target):
    try:
        out = op(*hargs, **hkwargs)
    except RuntimeError as exc:
        if not plan.outs or "not resizable" not in str(exc):
            raise
        return _run_growing_outs(op, plan, call, hargs, hkwargs, target)
    for _, name in plan.outs:   # an out= tensor the CPU kernel resized smaller: its neuron twin follows
        h = hkwargs.get(name)
        if isinstance(h, torch.Tensor):
            n = call.neuron_of(h)
            if n is not None and (h.shape != n.shape or h.stride() != n.stride()):
                _rebind(n, h, n.untyped_storage())
    return out if target is None else call.up(out, target.index)


def _run_growing_outs(op, plan, call, hargs, hkwargs, target):
    """An ``out=`` op whose out tensors must grow: a host view cannot, so the kernel writes fresh CPU
    tensors, whose memory then becomes the out tensors' new neuron storage."""
    fresh = {}
    for _, name in plan.outs:
        h = hkwargs.get(name)
        if isinstance(h, torch.Tensor):
            fresh[name] = (torch.empty(0, dtype=h.dtype), call.neuron_of(h))
            hkwargs[name] = fresh[name][0]
    out = op(*hargs, **hkwargs)
    index = target.index if target is not None else _state.current
    for f, n in fresh.values():
        grown = to_neuron(f, index)
        _state.allocated(grown.untyped_storage(), index)
        _rebind(n, f, grown.untyped_storage())
        call.hosts.append((f, n))
    return call.up(out, index)


def _rebind(n: torch.Tensor, h: torch.Tensor, storage) -> None:
    """Point neuron tensor ``n`` at ``storage`` with the sizes and strides of its host twin ``h``."""
    offset = (h.data_ptr() - storage.data_ptr()) // max(h.element_size(), 1)
    _aten.set_.source_Storage_storage_offset.redispatch(_CPU_KEYS, n, storage, offset, h.shape, h.stride())


def _seeded(op, plan, call, hargs, hkwargs, target):
    """Run a random op on the emulated core's generator."""
    core = _state.cores[target.index if target is not None else _state.current]
    if plan.generator is not None:
        name = op._schema.arguments[plan.generator].name
        if plan.generator < len(hargs):
            if hargs[plan.generator] is None:
                hargs = hargs[:plan.generator] + (core.generator,) + hargs[plan.generator + 1:]
        elif hkwargs.get(name) is None:
            hkwargs[name] = core.generator
        return _run(op, plan, call, hargs, hkwargs, target)
    # no generator argument (native_dropout): lend the core's state to the CPU default generator
    default = torch.default_generator
    saved = default.get_state()
    default.set_state(core.generator.get_state())
    try:
        return _run(op, plan, call, hargs, hkwargs, target)
    finally:
        core.generator.set_state(default.get_state())
        default.set_state(saved)


# -- special ops --------------------------------------------------------------------------------------
def _host(t: torch.Tensor) -> torch.Tensor:
    return to_host(t) if t.device.type == NAME else t


def _copy_from(op, src, dst, non_blocking=False):
    _host(dst).copy_(_host(src))
    return dst


def _copy_from_and_resize(op, src, dst):
    if dst.shape != src.shape:
        dst.resize_(src.shape)
    _host(dst).copy_(_host(src))
    return dst


def _strides(size, memory_format) -> tuple:
    return torch.empty(size, device="meta", memory_format=memory_format or torch.contiguous_format).stride()


def _resize_(op, self, size, memory_format=None):
    try:
        return op.redispatch(_CPU_KEYS, self, size, memory_format=memory_format)
    except RuntimeError as exc:
        if "not resizable" not in str(exc):
            raise
    # growing: a new storage that starts with the old bytes (resize_ keeps the data it had)
    index = self.device.index
    old = self.untyped_storage()
    grown = torch.empty((self.storage_offset() + math.prod(size)) * self.element_size(), dtype=torch.uint8)
    flat = torch.empty(0, dtype=torch.uint8, device=self.device)
    _aten.set_.source_Storage_storage_offset.redispatch(_CPU_KEYS, flat, old, 0, [old.nbytes()], [1])
    grown[:old.nbytes()].copy_(to_host(flat))
    storage = to_neuron(grown, index).untyped_storage()
    _state.allocated(storage, index)
    _aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYS, self, storage, self.storage_offset(), size, _strides(size, memory_format))
    return self


def _set_empty(op, self):
    empty = torch.empty(0, dtype=self.dtype, device=self.device)
    return _aten.set_.source_Storage.redispatch(_CPU_KEYS, self, empty.untyped_storage())


def _record_stream(op, self, stream):
    return None


_SPECIAL = {
    _aten._copy_from.default: _copy_from,
    _aten._copy_from_and_resize.default: _copy_from_and_resize,
    _aten.resize_.default: _resize_,
    _aten.set_.default: _set_empty,
    _aten.record_stream.default: _record_stream,
}

_library = None
_direct = None


def _overload(name: str):
    packet, _, overload = name.split("::", 1)[1].partition(".")
    return getattr(getattr(_aten, packet), overload or "default")


def _cpu_kernels_over_composites():
    """aten ops with a CPU kernel and also a composite one, which a device without a kernel of its own
    would run instead (``add.Tensor`` through ``add.out``; ``native_layer_norm`` through its math
    decomposition): on the emulated device they run the CPU kernel, so results match the CPU's bit for bit
    and each op crosses into Python once."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in torch._C._dispatch_get_all_op_names():
        if (not name.startswith("aten::") or not has(name, "CPU") or has(name, "PrivateUse1")
                or not (has(name, "CompositeExplicitAutograd")
                        or has(name, "CompositeExplicitAutogradNonFunctional"))):
            continue
        try:
            op = _overload(name)
        except AttributeError:
            continue
        if _Plan(op).kind == "compute":
            yield name.split("::", 1)[1], op


def _conv_backward_args(grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
                        groups, output_mask):
    bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
    return (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
            output_mask)


# Ops aten leaves to "other" devices ("overrideable": their default kernel raises), run as the CPU's op
_TRANSLATED = {
    "convolution_overrideable": (_aten.convolution.default, lambda *args: args),
    "convolution_backward_overrideable": (_aten.convolution_backward.default, _conv_backward_args),
}


def _translated(op, arguments):
    def kernel(*args, **kwargs):
        return fallback(op, *arguments(*args, **kwargs))

    return kernel


def _bound(op):
    def kernel(*args, **kwargs):
        return fallback(op, *args, **kwargs)

    return kernel


def install(state) -> None:
    """Register the fallback for PrivateUse1, and as the PrivateUse1 kernel of the ops a composite would
    otherwise take (once per process)."""
    global _library, _direct, _state
    _state = state
    if _library is None:
        _library = torch.library.Library("_", "IMPL")
        _library.fallback(fallback, "PrivateUse1")
        _direct = torch.library.Library("aten", "IMPL")
        for name, op in _cpu_kernels_over_composites():
            _direct.impl(name, _bound(op), "PrivateUse1")
        for name, (op, arguments) in _TRANSLATED.items():
            _direct.impl(name, _translated(op, arguments), "PrivateUse1")
