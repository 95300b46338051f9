"""The compiled hot loops (policies/fast_paths.py explains them), as optional extensions.

Everything else is in pyproject.toml. Without a C compiler the install still succeeds and the
loops run as Python; `-ffp-contract=off` keeps the compiler from fusing a multiply and an add,
which would round differently from the Python the loops must equal.
"""

from setuptools import Extension, setup

COMPILED = {  # module: its C source
    "policies._fast_admission": "policies/_fast_admission.c",
    "policies._fast_estimate": "policies/_fast_estimate.c",
    "policies._fast_tiers": "policies/_fast_tiers.c",
    "gateway.core._fast_prefix": "gateway/core/_fast_prefix.c",
}

setup(
    ext_modules=[
        Extension(
            name,
            [source],
            depends=["policies/_fast.h"],
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        )
        for name, source in COMPILED.items()
    ]
)
