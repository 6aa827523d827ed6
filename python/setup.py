"""Packaging step that pyproject.toml cannot express: bundle a built libflashattn.

At build time the first library found is copied to flashattn/lib/libflashattn.so inside the
wheel, with its CUDA backend libflashattn_cuda.so when one is beside it: $FA_LIBRARY, else the
repository's CMake build directories (build/, build-gpu/, build-cpu/ next to this python/
folder); the wheel is then tagged py3-none-<platform>. Without one the package installs without a
library, as a pure py3-none-any wheel, and finds it at run time through $FA_LIBRARY
(docs/python.md). The license file is the repository's LICENSE (python/LICENSE links to it,
which setuptools' default license-file patterns pick up)."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
except ImportError:
    from wheel.bdist_wheel import bdist_wheel  # older setuptools build wheels with this one

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def built_library():
    env = os.environ.get("FA_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise SystemExit(f"FA_LIBRARY={env} does not exist")
        return env
    for d in ("build", "build-gpu", "build-cpu"):
        path = os.path.join(REPO, d, "libflashattn.so")
        if os.path.isfile(path):
            return path
    return None


LIBRARY = built_library()


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        if LIBRARY is None:
            print("flashattn: no built libflashattn found (build with CMake first, or set "
                  "FA_LIBRARY); installing without it")
            return
        dest = os.path.join(self.build_lib, "flashattn", "lib")
        os.makedirs(dest, exist_ok=True)
        # copy follows the libflashattn.so -> .so.0 -> .so.0.5.0 symlinks: one real file.
        shutil.copy(LIBRARY, os.path.join(dest, "libflashattn.so"))
        print(f"flashattn: bundled {os.path.realpath(LIBRARY)}")
        # A CUDA build's backend, which libflashattn.so opens from its own directory.
        backend = os.path.join(os.path.dirname(LIBRARY), "libflashattn_cuda.so")
        if os.path.isfile(backend):
            shutil.copy(backend, os.path.join(dest, "libflashattn_cuda.so"))
            print(f"flashattn: bundled {backend}")


class MaybeBinaryDistribution(Distribution):
    # A wheel carrying a .so must be tagged for this platform, not as pure Python.
    def has_ext_modules(self):
        return LIBRARY is not None


class PlatformWheel(bdist_wheel):
    # The library is loaded through ctypes, not imported as an extension module: one wheel serves
    # every Python 3 on this platform (py3-none-<platform>, as the root pyproject.toml's wheel).
    def get_tag(self):
        python, abi, platform = super().get_tag()
        return ("py3", "none", platform) if LIBRARY is not None else (python, abi, platform)


setup(cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
      distclass=MaybeBinaryDistribution)
