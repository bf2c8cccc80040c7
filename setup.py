"""Build configuration beyond pyproject.toml (which holds the metadata): the optional compiled walk.

mploader.scan._walk is the C fast path of Phase 1's walk (mploader/scan/_walk.c). It is optional:
where it cannot be built (no compiler), the install goes on and mploader.scan.walk uses its pure-Python
loop, the reference. An editable install (``pip install -e .``) builds it in place.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("mploader.scan._walk", ["mploader/scan/_walk.c"], optional=True,
                  extra_compile_args=["-O3", "-Wall", "-Wextra"]),
    ],
)
