"""Which build variant of a kernel repo runs here, and why the others do not.

nkihub publishes pure-Python ("noarch") variants in the Hugging Face layout: ``torch-neuron``
(hands the kernel to the Neuron toolchain) and ``torch-cpu`` (runs it on the simulator). On a
machine with Neuron (``torch_neuronx`` importable) the preference is neuron, then cpu; elsewhere
only cpu. Compiled variants (``torch28-cxx11-cu128-x86_64-linux`` ...) are reported, never chosen.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from typing import Iterable

KNOWN_BACKENDS = ("neuron", "cpu")
PUBLISHED_VARIANTS = ("torch-neuron", "torch-cpu")


def neuron_available() -> bool:
    return importlib.util.find_spec("torch_neuronx") is not None


def system_backends() -> tuple[str, ...]:
    """Backends usable here, most preferred first."""
    return ("neuron", "cpu") if neuron_available() else ("cpu",)


@dataclass(frozen=True)
class Decision:
    variant: str
    accepted: bool
    reason: str

    def __str__(self) -> str:
        return f"{self.variant}: {'accepted' if self.accepted else 'rejected'} ({self.reason})"


@dataclass(frozen=True)
class VariantSelection:
    """All decisions, accepted first in preference order; ``chosen`` is the first accepted or None."""

    decisions: tuple[Decision, ...]

    @property
    def chosen(self) -> str | None:
        return next((d.variant for d in self.decisions if d.accepted), None)

    @property
    def rejected(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.accepted)

    def table(self) -> str:
        if not self.decisions:
            return "(no build variants)"
        width = max(len(d.variant) for d in self.decisions)
        lines = []
        for d in self.decisions:
            mark = "chosen" if d.variant == self.chosen else ("ok" if d.accepted else "rejected")
            lines.append(f"{d.variant:<{width}}  {mark:<8}  {d.reason}")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"chosen": self.chosen, "decisions": [d.__dict__ for d in self.decisions]}, indent=1)

    def __str__(self) -> str:
        return self.table()


class NoCompatibleVariantError(FileNotFoundError):
    """No build variant of the repo runs here; ``selection`` lists each variant with its reason."""

    def __init__(self, where: str, selection: VariantSelection):
        self.selection = selection
        detail = selection.table().replace("\n", "\n  ")
        super().__init__(
            f"{where} has no build variant for this machine (usable backends: {', '.join(system_backends())}).\n  {detail}"
        )


def select_variant(available: Iterable[str], backend: str | None = None) -> VariantSelection:
    """Decide for each variant name whether it can run here and order the usable ones.

    ``backend`` (``"cpu"`` or ``"neuron"``) restricts the choice to that backend, as the
    ``backend=`` argument of Hugging Face kernels does.
    """
    usable = system_backends()
    if backend is not None:
        if backend not in KNOWN_BACKENDS:
            raise ValueError(f"Invalid backend {backend!r}, supported backends: {', '.join(KNOWN_BACKENDS)}")
        usable = tuple(b for b in usable if b == backend)
    accepted, rejected = [], []
    for name in sorted(set(available)):
        parts = name.split("-")
        if parts[0] == "torch" and len(parts) >= 2:
            b = "-".join(parts[1:])
            if b == "universal":
                accepted.append((len(usable), Decision(name, True, "universal pure-Python build")))
            elif b in usable:
                accepted.append((usable.index(b), Decision(name, True, f"backend {b} is available")))
            elif b == "neuron" and backend in (None, "neuron"):
                rejected.append(Decision(name, False, "backend neuron is not available (torch_neuronx not importable)"))
            elif backend is not None and b in KNOWN_BACKENDS:
                rejected.append(Decision(name, False, f"backend {b} not requested (backend={backend!r})"))
            else:
                rejected.append(Decision(name, False, f"backend {b} is not supported by nkihub"))
        elif name.startswith("torch") or name.startswith("tvm-ffi"):
            rejected.append(Decision(name, False, "compiled (arch) build; nkihub loads only pure-Python variants"))
        else:
            rejected.append(Decision(name, False, "not a build variant name"))
    ordered = [d for _, d in sorted(accepted, key=lambda t: t[0])] + rejected
    return VariantSelection(tuple(ordered))
