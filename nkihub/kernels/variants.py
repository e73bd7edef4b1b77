"""Which build variant of a kernel repo runs here, and why the others do not: Hugging Face kernels' rules.

The resolution is theirs (``kernels`` 0.19: a variant name is parsed and accepted or rejected for this
system's backend, torch version, CPU and OS, then ordered by preference), so ``kernels.get`` here and their
``get_kernel`` choose the same build: ``torch-neuron`` where ``torch.neuron`` exists (what ``torch_neuronx``
creates), ``torch-cpu`` elsewhere, ``torch-universal`` anywhere. nkihub adds one rule of its own: it loads a
package from the bytes it verified, so a compiled (arch) build, even one matching this machine, is reported
and never chosen. The decisions are records (:class:`VariantSelection`) that a user can print.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

KNOWN_BACKENDS = ("neuron", "cpu")
PUBLISHED_VARIANTS = ("torch-neuron", "torch-cpu")
COMPILED = "compiled (arch) build; nkihub loads only pure-Python variants"


def neuron_available() -> bool:
    """True where Hugging Face kernels sees a Neuron backend: ``torch.neuron`` exists."""
    import torch

    return hasattr(torch, "neuron")


def system_backends() -> tuple[str, ...]:
    """Backends whose builds can load here, most preferred first."""
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
    """Decide for each variant name (``torch-cpu``, ``torch-neuron``, ``torch28-cxx11-cu128-x86_64-linux``
    ...) whether it can load here, by Hugging Face kernels' rules, and order the usable ones.

    ``backend`` (``"cpu"`` or ``"neuron"``) restricts the choice to that backend, as the ``backend=``
    argument of their ``get_kernel`` does; a backend this machine lacks rejects every variant, saying so.
    """
    from kernels._internals.variants import NoarchVariant, VariantAccepted, parse_variant, resolve_variants

    if backend is not None and backend not in KNOWN_BACKENDS:
        raise ValueError(f"Invalid backend {backend!r}, supported backends: {', '.join(KNOWN_BACKENDS)}")
    parsed, rejected = [], []
    for name in sorted(set(available)):
        try:
            parsed.append(parse_variant(name))
        except ValueError as exc:
            rejected.append(Decision(name, False, f"not a build variant name ({exc})"))
    try:
        _, trace = resolve_variants(parsed, backend)
    except ValueError as exc:  # a backend this machine does not have
        trace = None
        rejected = [Decision(v.variant_str, False, str(exc)) for v in parsed] + rejected
    accepted = []
    for d in trace or ():
        name = d.variant.variant_str
        if not isinstance(d, VariantAccepted):
            rejected.append(Decision(name, False, d.reason))
        elif isinstance(d.variant, NoarchVariant):
            backend_name = d.variant.backend.backend_name
            why = "universal pure-Python build" if backend_name == "universal" else f"backend {backend_name} is available"
            accepted.append(Decision(name, True, why))
        else:
            rejected.append(Decision(name, False, COMPILED))
    return VariantSelection(tuple(accepted + rejected))
