"""eigen/<system version>: Eigen from the system's package (Debian's libeigen3-dev), for offline use.

ConanCenter cannot be reached from megacpp's CI machines, so `conan create` of megacpp needs its
`eigen` requirement from somewhere else. This recipe packages nothing: it points consumers at the
system's headers (/usr/include/eigen3, or EIGEN3_INCLUDE_DIR) and gives them the same CMake names as
ConanCenter's eigen recipe (find_package(Eigen3), target Eigen3::Eigen), so megacpp's recipe and
CMake files work unchanged with either. Its version is the system Eigen's, read from Macros.h.

    conan export packaging/conan/recipes/eigen-system
"""
import os
import re

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration


def _system_include_dir():
    return os.environ.get("EIGEN3_INCLUDE_DIR", "/usr/include/eigen3")


class EigenSystemConan(ConanFile):
    name = "eigen"
    description = "Eigen headers of the system package (no download), ConanCenter-compatible CMake names"
    license = "MPL-2.0"
    package_type = "header-library"
    homepage = "https://eigen.tuxfamily.org"
    url = "https://github.com/conan-io/conan-center-index (the online recipe this one stands in for)"

    def set_version(self):
        macros = os.path.join(_system_include_dir(), "Eigen", "src", "Core", "util", "Macros.h")
        if not os.path.isfile(macros):
            raise ConanException(f"eigen-system: {macros} not found: install libeigen3-dev or set EIGEN3_INCLUDE_DIR")
        with open(macros, encoding="utf-8") as f:
            text = f.read()
        parts = [re.search(rf"#define EIGEN_{part}_VERSION\s+(\d+)", text) for part in ("WORLD", "MAJOR", "MINOR")]
        if not all(parts):
            raise ConanException(f"eigen-system: no EIGEN_*_VERSION defines in {macros}")
        self.version = ".".join(m.group(1) for m in parts)

    def validate(self):
        if not os.path.isdir(os.path.join(_system_include_dir(), "Eigen")):
            raise ConanInvalidConfiguration(f"eigen-system: no Eigen headers under {_system_include_dir()}")

    def package_id(self):
        self.info.clear()

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "Eigen3")
        self.cpp_info.set_property("cmake_target_name", "Eigen3::Eigen")
        self.cpp_info.set_property("pkg_config_name", "eigen3")
        self.cpp_info.includedirs = [_system_include_dir()]  # absolute: the system's headers
        self.cpp_info.libdirs = []
        self.cpp_info.bindirs = []
