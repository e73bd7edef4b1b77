"""Swap model layers for kernel-backed ones, with the names Hugging Face ``kernels`` uses.

    from nkihub.kernels import kernelize, Mode
    model = kernelize(model, mode=Mode.INFERENCE, device="cpu")
    print(model.kernelize_report)          # what was replaced, what was left and why

A layer is a candidate when its class carries ``kernel_layer_name`` (``@use_kernel_forward_from_hub``,
``replace_kernel_forward_from_hub``) or, for classes nobody marked (transformers' vision layers), when the
kernel mapping has an entry under its class name. The mapping (``register_kernel_mapping``,
``use_kernel_mapping``) goes layer name -> device type (``"cpu"`` runs the simulator, ``"neuron"`` the
device) -> repository, or -> {Mode: repository}. A repository's ``load()`` returns the layer class, as
Hugging Face kernels' repositories do: ``module.layers.<layer_name>`` of the kernel module (a Hub kernel's
own layers) or, for transformers' vision layers, the adapter in :mod:`nkihub.kernels.vit` bound to that
module. ``Mode``, ``Device``, ``use_kernel_forward_from_hub`` and ``replace_kernel_forward_from_hub`` are
Hugging Face kernels' own; nkihub's ``LayerRepository`` is a subclass of theirs that loads through nkihub,
and a mapping given their ``LayerRepository`` loads it through nkihub too. Replacing sets the module's ``forward`` to the
layer's, as Hugging Face kernels does; every decision lands in a :class:`KernelizeReport`.
"""
from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import json
import os
from collections import Counter
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MethodType

# Hugging Face kernels' own: the same Mode flag, Device and layer marking, so a mapping or a model
# written for their kernelize works with this one unchanged (transformers marks its layers with theirs).
from kernels import Device, Mode, replace_kernel_forward_from_hub, use_kernel_forward_from_hub  # noqa: F401
from kernels import LayerRepository as _HfLayerRepository

from .device import resolve_device

SUPPORTED_DEVICES = ("cpu", "neuron")

_MODE_PRIORITY = {
    Mode.INFERENCE: [Mode.INFERENCE, Mode.INFERENCE | Mode.TORCH_COMPILE, Mode.TRAINING,
                     Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK],
    Mode.TRAINING: [Mode.TRAINING, Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK],
    Mode.INFERENCE | Mode.TORCH_COMPILE: [Mode.INFERENCE | Mode.TORCH_COMPILE, Mode.TRAINING | Mode.TORCH_COMPILE,
                                          Mode.FALLBACK],
    Mode.TRAINING | Mode.TORCH_COMPILE: [Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK],
}


# ---- repositories ----------------------------------------------------------------------------------
class LayerRepository(_HfLayerRepository):
    """A layer of a Hub kernel repo: ``LayerRepository("neuron/vit-attn", layer_name="ViTAttention",
    version=1)``, Hugging Face kernels' class of that name loading through nkihub (digests, signatures,
    trust, NKI checks, import from verified bytes). ``version`` (a major version) or ``revision`` pins it;
    with neither the newest ``vN`` is used (nkihub only: theirs requires one). ``trust_remote_code`` and
    ``user_agent`` are passed to the load. Being theirs too, it also goes into their ``kernelize``."""

    def __init__(self, repo_id: str, *, layer_name: str, revision: str | None = None, version=None,
                 trust_remote_code: bool | list[str] = False, user_agent=None, check_arch: bool = True):
        if revision is not None and version is not None:
            raise ValueError("Either a revision or a version must be specified, not both.")
        # their __init__ refuses neither-version-nor-revision; the attributes are theirs
        self._repo_id, self.layer_name, self._revision, self._version = repo_id, layer_name, revision, version
        self._trust_remote_code = list(trust_remote_code) if isinstance(trust_remote_code, list) else trust_remote_code
        self._user_agent, self._check_arch = user_agent, check_arch

    @classmethod
    def of(cls, repo) -> "LayerRepository":
        """nkihub's repository for a Hugging Face ``LayerRepository`` (same repo, pin and trust), so a mapping
        written with theirs loads through nkihub's checks; any other repository is returned as it is."""
        if isinstance(repo, LayerRepository) or not isinstance(repo, _HfLayerRepository):
            return repo
        return cls(repo._repo_id, layer_name=repo.layer_name, revision=repo._revision, version=repo._version,
                   trust_remote_code=repo._trust_remote_code, user_agent=repo._user_agent)

    @property
    def repo_id(self) -> str:
        return self._repo_id

    def load_kernel(self):
        """The kernel module (``kernels.get``)."""
        from .loading import get

        return get(self._repo_id, version=self._version, revision=self._revision,
                   trust_remote_code=self._trust_remote_code)

    def load(self):
        """The layer class (an ``nn.Module`` subclass), as Hugging Face kernels' repositories return it."""
        return layer_class(self.load_kernel(), self.layer_name)

    def __str__(self) -> str:
        pin = f"version {self._version}" if self._version is not None else f"revision {self._revision or 'newest'}"
        return f"`{self._repo_id}` ({pin}), layer `{self.layer_name}`"


class LocalLayerRepository(LayerRepository):
    """A layer of a kernel in a local directory (a repo checkout, snapshot or package):
    ``LocalLayerRepository(path, layer_name=...)`` as Hugging Face kernels' class; ``package_name`` is
    accepted for older nkihub code and not needed."""

    def __init__(self, repo_path: Path, *, layer_name: str, package_name: str | None = None):
        super().__init__(str(repo_path), layer_name=layer_name)
        self.repo_path, self.package_name = Path(repo_path), package_name

    def load_kernel(self):
        from .loading import get_local_kernel

        return get_local_kernel(self.repo_path)

    def __str__(self) -> str:
        package = f" (package: {self.package_name})" if self.package_name else ""
        return f"`{self.repo_path}`{package}, layer `{self.layer_name}`"


class LibraryLayerRepository(LayerRepository):
    """A layer of an in-tree library kernel (``kernels.library``), by its Hub repo id; nothing is
    downloaded. This is what the default mapping uses."""

    def load_kernel(self):
        from .library import LIBRARY

        if self.repo_id not in LIBRARY:
            raise ValueError(f"{self.repo_id} is not in the in-tree kernel library ({', '.join(sorted(LIBRARY))})")
        return importlib.import_module(LIBRARY[self.repo_id])

    def __str__(self) -> str:
        return f"`{self.repo_id}` (in-tree library), layer `{self.layer_name}`"


# ---- mappings ------------------------------------------------------------------------------------------
_KERNEL_MAPPING: ContextVar[dict] = ContextVar("_KERNEL_MAPPING", default={})


# Device types a Hugging Face kernels mapping may name: accepted (so their mappings work unchanged),
# kept, and matched only when kernelizing for that device (nkihub kernelizes for cpu and neuron).
MAPPING_DEVICES = ("cpu", "cuda", "mps", "neuron", "npu", "rocm", "tpu", "xpu")


def _device_key(device) -> str:
    kind = getattr(device, "type", None) or str(device)
    if kind not in MAPPING_DEVICES:
        raise ValueError(f"device: kernel mappings take {MAPPING_DEVICES}, got {kind!r}")
    return kind


def register_kernel_mapping(mapping: dict, inherit_mapping: bool = True) -> None:
    """Add ``{layer_name: {device: repository or {Mode: repository}}}`` to the current mapping
    (``inherit_mapping=False`` clears it first)."""
    current = _KERNEL_MAPPING.get() if inherit_mapping else {}
    if not inherit_mapping:
        _KERNEL_MAPPING.set(current)
    for layer_name, devices in mapping.items():
        entry = current.setdefault(layer_name, {})
        for dev, repos in devices.items():
            repos = repos if isinstance(repos, dict) else {Mode.FALLBACK: repos}
            entry[_device_key(dev)] = {m: LayerRepository.of(r) for m, r in repos.items()}


@contextlib.contextmanager
def use_kernel_mapping(mapping: dict, *, inherit_mapping: bool = True):
    """Use ``mapping`` (on top of the current one, unless ``inherit_mapping=False``) inside the block."""
    token = _KERNEL_MAPPING.set(copy.deepcopy(_KERNEL_MAPPING.get()) if inherit_mapping else {})
    try:
        register_kernel_mapping(mapping)
        yield
    finally:
        _KERNEL_MAPPING.reset(token)


# ---- the report ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerDecision:
    """One candidate layer: ``status`` is ``replaced``, ``fallback`` (kept its own forward, see
    ``reason``) or ``covered`` (inside a replaced parent, whose kernel does its work)."""

    module: str
    layer_name: str
    module_class: str
    status: str
    kernel: str | None
    reason: str


@dataclass(frozen=True)
class KernelizeReport:
    """What :func:`kernelize` did to a model; ``print(report)`` shows a table."""

    mode: str
    device: str
    decisions: tuple[LayerDecision, ...]
    unmapped: dict = field(default_factory=dict)

    @property
    def replaced(self) -> list[LayerDecision]:
        return [d for d in self.decisions if d.status == "replaced"]

    @property
    def rejected(self) -> list[LayerDecision]:
        return [d for d in self.decisions if d.status == "fallback"]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def table(self) -> str:
        rows = [("module", "layer", "status", "kernel / reason")]
        rows += [(d.module, d.layer_name, d.status, d.kernel if d.status == "replaced" else d.reason)
                 for d in self.decisions]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"kernelize(mode={self.mode}, device={self.device}): {len(self.replaced)} replaced, "
                 f"{len(self.rejected)} kept their forward"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in rows]
        if self.unmapped:
            lines.append("not kernelizable (no kernel_layer_name, no mapping): "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(self.unmapped.items())))
        return "\n".join(lines)

    __str__ = table


# ---- kernelize -----------------------------------------------------------------------------------------
class _Rejected(Exception):
    pass


def _restore(module) -> None:
    module.__dict__.pop("forward", None)  # the class's own forward again


def layer_class(kernel, layer_name: str):
    """The layer ``layer_name`` of the kernel module ``kernel``: its own ``layers.<layer_name>``, or for
    transformers' vision layers the adapter of :mod:`nkihub.kernels.vit` bound to the kernel."""
    from . import vit

    if vit.knows(layer_name):  # the kernel's own layer (or one built for it) with nkihub's checks added
        return vit.layer_for(kernel, layer_name)
    layer = getattr(getattr(kernel, "layers", None), layer_name, None)
    if layer is None:
        raise ValueError(f"the kernel {getattr(kernel, '__name__', kernel)!r} has no layer `{layer_name}` "
                         "(no `layers` module with that class)")
    return layer


def _check_layer(layer, module, mode: Mode) -> None:
    import torch.nn as nn

    if not (isinstance(layer, type) and issubclass(layer, nn.Module)):
        raise _Rejected(f"layer {layer!r} is not a torch.nn.Module class")
    if layer.__init__ is not nn.Module.__init__:
        raise _Rejected(f"layer {layer.__name__} overrides __init__ (kernel layers must be stateless)")
    params = list(inspect.signature(layer.forward).parameters.values())
    ref = list(inspect.signature(type(module).forward).parameters.values())
    if [p.kind for p in params] != [p.kind for p in ref]:
        raise _Rejected(f"forward signature of {layer.__name__} does not match {type(module).__name__}.forward")
    if Mode.TORCH_COMPILE in mode and not getattr(layer, "can_torch_compile", False):
        raise _Rejected("the kernel layer does not support torch.compile")
    if Mode.TRAINING in mode and not getattr(layer, "has_backward", True):
        raise _Rejected("the kernel layer has no backward (training needs one)")
    check = getattr(layer, "unsupported_reason", None)
    reason = check(module, mode) if check is not None else None
    if reason:
        raise _Rejected(reason)


def _decide(module, layer_name: str, mapping: dict, mode: Mode, device: str):
    """(layer class, repository) for one module, or raise _Rejected with the reason."""
    if os.environ.get("DISABLE_KERNEL_MAPPING", "0") not in ("", "0"):
        raise _Rejected("DISABLE_KERNEL_MAPPING is set")
    devices = mapping.get(layer_name)
    if devices is None:
        raise _Rejected(f"no kernel mapping for layer `{layer_name}`")
    repos = devices.get(device)
    if not repos:
        raise _Rejected(f"no kernel for device `{device}` (mapped: {', '.join(sorted(devices)) or 'none'})")
    repo = next((repos[m] for m in _MODE_PRIORITY[mode] if m in repos), None)
    if repo is None:
        raise _Rejected(f"no kernel for mode {mode} (mapped modes: {', '.join(str(m) for m in repos)})")
    try:
        layer = repo.load()
    except Exception as exc:  # a kernel that will not load is a reason, not a crash (use_fallback decides)
        raise _Rejected(f"loading {repo} failed: {type(exc).__name__}: {exc}") from exc
    _check_layer(layer, module, mode)
    return layer, repo


def _device_of(model, device) -> str:
    if device is not None:
        return resolve_device(device)
    param = next(iter(model.parameters()), None)
    return resolve_device(param.device if param is not None else "cpu")


def kernelize(model, *, mode: Mode, device=None, use_fallback: bool = True):
    """Replace the forward of every mapped layer of ``model`` with its kernel's, for ``mode`` on
    ``device`` (``"cpu"``: the simulator; ``"neuron"``: raises NeuronUnavailableError without one;
    None: the device of the model's parameters). Layers with no usable kernel keep their own forward
    (``use_fallback=False`` raises ValueError instead). Returns ``model``, with the
    :class:`KernelizeReport` in ``model.kernelize_report``."""
    if mode == Mode.FALLBACK:
        raise ValueError("mode: Mode.FALLBACK can only be used to register kernel mappings")
    if Mode.INFERENCE not in mode and Mode.TRAINING not in mode:
        raise ValueError("mode: kernelize needs Mode.INFERENCE or Mode.TRAINING")
    device_type = _device_of(model, device)
    mapping = _KERNEL_MAPPING.get()
    decisions, replaced, unmapped = [], [], Counter()
    for name, module in model.named_modules():
        cls = type(module)
        layer_name = getattr(cls, "kernel_layer_name", None) or (cls.__name__ if cls.__name__ in mapping else None)
        if layer_name is None:
            unmapped[cls.__name__] += 1
            continue
        where = name or "<root>"
        parent = next((p for p in replaced if p == "" or name.startswith(p + ".")), None)
        _restore(module)
        if parent is not None:
            decisions.append(LayerDecision(where, layer_name, cls.__name__, "covered", None,
                                           f"inside replaced {parent or '<root>'}"))
            continue
        condition = getattr(cls, "kernel_condition", None)
        if condition is not None and not condition(module):
            decisions.append(LayerDecision(where, layer_name, cls.__name__, "fallback", None,
                                           "its kernel_condition is false for this module"))
            continue
        try:
            layer, repo = _decide(module, layer_name, mapping, mode, device_type)
        except _Rejected as exc:
            if not use_fallback:
                raise ValueError(f"kernelize: {where} ({layer_name}): {exc}") from exc
            decisions.append(LayerDecision(where, layer_name, cls.__name__, "fallback", None, str(exc)))
            continue
        module.forward = MethodType(layer.forward, module)
        replaced.append(name)
        decisions.append(LayerDecision(where, layer_name, cls.__name__, "replaced", str(repo), ""))
    model.kernelize_report = KernelizeReport(str(mode), device_type, tuple(decisions), dict(unmapped))
    return model


def _default_mapping() -> dict:
    """The in-tree library's layers for transformers' vision transformers (every family of
    ``kernels.vit_parts.FAMILIES``: ViT, DeiT, DINOv2, SigLIP and CLIP vision) and torch's LayerNorm, on
    both devices."""
    from .vit_parts import FAMILIES

    def lib(repo_id, layer):
        return LibraryLayerRepository(repo_id, layer_name=layer)

    per_device = {"LayerNorm": {Mode.FALLBACK: lib("neuron/layernorm", "LayerNorm")}}
    for family in FAMILIES.values():
        per_device[family.layer] = {Mode.INFERENCE: lib("neuron/vit-block", "ViTLayer")}
        per_device[family.attention] = {Mode.INFERENCE: lib("neuron/vit-attn", "ViTAttention"),
                                        Mode.TRAINING: lib("neuron/flash-attn", "ViTAttention")}
        per_device[family.mlp] = {Mode.FALLBACK: lib("neuron/gelu-mlp", "ViTMLP")}
    return {name: {dev: dict(repos) for dev in SUPPORTED_DEVICES} for name, repos in per_device.items()}


register_kernel_mapping(_default_mapping())
