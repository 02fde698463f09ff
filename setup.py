"""Build configuration for the optional C accelerator (everything else is in pyproject.toml).

``smcdp.crypto._mont`` (Montgomery fixed-base and multi-exponentiation over GMP's mpn layer) is
*optional*: where no C compiler or GMP headers exist the build warns and smcdp runs on its
pure-Python/gmpy2 path, which computes the same values (tests compare the two).  On Debian the
headers are the ``libgmp-dev`` package; ``.ci/run`` and the Dockerfile install it.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "smcdp.crypto._mont",
            sources=["smcdp/crypto/_mont.c"],
            libraries=["gmp"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
