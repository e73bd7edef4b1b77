"""``nki.compiler``: the compiler entry points of AWS NKI 0.3+ (``nki.compiler.kernel_builder``)."""
