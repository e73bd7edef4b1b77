"""The probes env_check.py runs inside its fresh venv, one per process:

    python env_check_probes.py NAME [ARG]

Each prints one line of detail and exits 0, or raises (exit 1; the traceback's last line says why). The
kernel computations and the kernelize check are hf_kernels_checks.py's, imported from beside this file.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys


def their_kernels() -> str:
    """Check 2: ``import kernels`` is Hugging Face's (``CUDAProperties`` imports, the package lives in
    site-packages/kernels), nkihub is installed from its wheel, and ``nkihub.kernels.get`` exists."""
    import kernels
    from kernels import CUDAProperties  # noqa: F401  (a name only theirs has)

    from hf_kernels_checks import environment
    from nkihub import kernels as nk

    if not callable(getattr(nk, "get", None)):
        raise AssertionError("nkihub.kernels has no get()")
    return f"{environment(kernels, kernels.__version__)}; CUDAProperties and nkihub.kernels.get import"


def aliases() -> str:
    """Check 4: the top-level ``nki`` is nkihub's module object for module object, and ``neuronxcc.nki`` is
    importable (nkihub's old-dialect layer), with no AWS package installed."""
    import nki
    import nki.language as nl
    import nkihub.nki
    import neuronxcc.nki.language as ncl

    if nki is not nkihub.nki or nl is not nkihub.nki.language:
        raise AssertionError(f"nki is {nki.__name__}, nki.language is {nl.__name__}")
    if not ncl.__name__.startswith("nkihub.nki.compat"):
        raise AssertionError(f"neuronxcc.nki.language is {ncl.__name__} from {ncl.__file__}")
    return f"nki is nkihub.nki, nl is nkihub.nki.language, neuronxcc.nki.language is {ncl.__name__}"


def kernelize_llama() -> str:
    """Check 5: transformers kernelizes a tiny random Llama's RMSNorm layers through Hugging Face kernels with
    neuron/rmsnorm from the Hub at ``HF_ENDPOINT``; its output matches the model's own."""
    from hf_kernels_checks import kernelized

    return kernelized("neuron/rmsnorm", through_transformers=True)()


def vit_attn() -> str:
    """Check 6: Hugging Face's ``get_kernel`` and nkihub's ``kernels.get`` both load neuron/vit-attn v1 from the
    Hub at ``HF_ENDPOINT`` (trusted as the Hub reports the ``neuron`` organization), in one process, and
    ``vit_attention`` matches torch's scaled_dot_product_attention on random fp32 inputs."""
    import kernels

    from hf_kernels_checks import compute
    from nkihub import kernels as nk

    theirs = kernels.get_kernel("neuron/vit-attn", version=1)
    ours = nk.get("neuron/vit-attn", version=1)
    return (f"theirs ({theirs.__name__}): {compute('neuron/vit-attn', theirs)}; "
            f"ours ({ours.__name__}): {compute('neuron/vit-attn', ours)}")


def whole(dist: str) -> str:
    """Every file the installed distribution ``dist`` lists in its RECORD exists."""
    files = importlib.metadata.distribution(dist).files or []
    missing = [str(f) for f in files if not f.locate().exists()]
    if missing:
        raise AssertionError(f"{len(missing)} of {len(files)} files of {dist} missing: {missing[:5]}")
    return f"all {len(files)} files of {dist} {importlib.metadata.version(dist)} present"


def their_kernels_whole() -> str:
    """Check 7, after ``pip uninstall nkihub``: nkihub is gone, Hugging Face kernels imports and is whole."""
    from kernels import CUDAProperties  # noqa: F401

    if importlib.util.find_spec("nkihub") is not None:
        raise AssertionError("nkihub is still importable")
    return f"nkihub gone; CUDAProperties imports; {whole('kernels')}"


def standin(nkihub_installed: str) -> str:
    """Check 8: with another distribution's ``nki`` installed, ``import nki`` is that one; with nkihub
    installed too (``nkihub_installed`` "yes"), ``nkihub.nki`` still works and nkihub says ``nki`` is not its."""
    import nki

    if getattr(nki, "STANDIN", None) is not True:
        raise AssertionError(f"import nki gives {nki.__name__} from {nki.__file__}")
    detail = f"import nki gives the stand-in ({nki.__file__})"
    if nkihub_installed == "yes":
        import nkihub.nki
        from nkihub import aliases

        if nkihub.nki is nki or aliases.resolve("nki") != "other":
            raise AssertionError(f"nkihub claims nki: resolve says {aliases.resolve('nki')!r}")
        detail += f"; nkihub.nki imports ({nkihub.nki.__name__}), resolve('nki') == 'other'"
    elif importlib.util.find_spec("nkihub") is not None:
        raise AssertionError("nkihub is still importable")
    return f"{detail}; {whole('nki')}"


PROBES = {f.__name__: f for f in (their_kernels, aliases, kernelize_llama, vit_attn, their_kernels_whole, standin)}

if __name__ == "__main__":
    print(PROBES[sys.argv[1]](*sys.argv[2:]))
