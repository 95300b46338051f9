"""The compiled hot loops (policies/fast_paths.py explains them), as optional extensions.

Everything else is in pyproject.toml. Without a C compiler the install still succeeds and the
policies run as pure Python; `-ffp-contract=off` keeps the compiler from fusing a multiply and
an add, which would round differently from the Python the loops must equal.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            f"policies._fast_{name}",
            [f"policies/_fast_{name}.c"],
            depends=["policies/_fast.h"],
            extra_compile_args=FLAGS,
            optional=True,
        )
        for name in ("admission", "estimate", "tiers")
    ]
)
