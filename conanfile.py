"""Conan 2 recipe for megacpp, a header-only C++20 tensor + autograd library.

    conan create . -s compiler.cppstd=20 [-o "&:mpi=True"] [-o "&:cuda=True"]

The package holds the installed headers and megacpp's own CMake package files
(share/cmake/megacpp). CMake consumers get megacpp's megacppConfig.cmake rather than one generated
by CMakeDeps, so `find_package(megacpp REQUIRED [COMPONENTS cuda mpi nccl])` gives the same targets
and components whether megacpp came from conan, the vcpkg port or `cmake --install`: one package
description, tested through all three (scripts/ci-packaging.sh). Other generators get the usual
cpp_info below.

Requirements: eigen (headers; ConanCenter's recipe, or packaging/conan/recipes/eigen-system
offline); boost only for the examples (option `examples`), never for consumers. OpenMP comes from
the compiler. The CUDA toolkit, NCCL and MPI come from the system: the options `cuda` and `mpi`
declare those components (and make test_package check them); megacppConfig.cmake finds them when a
consumer asks for them.
"""
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load

required_conan_version = ">=2.0"


class MegacppConan(ConanFile):
    name = "megacpp"
    license = "MIT"
    # No url/homepage: megacpp has no public address yet, and both fields are optional in Conan 2.
    description = "Header-only C++20 tensors, autograd and hybrid LM layers, with CPU (Eigen) and CUDA backends"
    topics = ("deep-learning", "autograd", "tensor", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"cuda": [True, False], "mpi": [True, False], "examples": [True, False]}
    default_options = {"cuda": False, "mpi": False, "examples": False}
    exports_sources = ("LICENSE", "CMakeLists.txt", "cmake/*", "include/*", "backends/*/include/*", "examples/*")
    no_copy_source = True

    def set_version(self):
        cmakelists = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        self.version = re.search(r"project\(megacpp\s+VERSION\s+([0-9.]+)", cmakelists).group(1)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        # megacpp's public headers include Eigen's: consumers must see them.
        self.requires("eigen/[>=3.4.0 <6]", transitive_headers=True)
        if self.options.examples:
            # The trainer CLI (Boost.Program_options) is an example, not part of the library.
            self.requires("boost/[>=1.74.0]", visible=False)

    def validate(self):
        check_min_cppstd(self, 20)

    def package_id(self):
        # Headers only, identical for every setting and option: one package serves all.
        self.info.clear()

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["MEGACPP_BUILD_TESTS"] = False
        tc.cache_variables["MEGACPP_BUILD_BENCH"] = False
        tc.cache_variables["MEGACPP_BUILD_EXAMPLES"] = bool(self.options.examples)
        tc.cache_variables["MEGACPP_NATIVE"] = False
        # Installing headers never needs CUDA or MPI; consumers find them through the components.
        tc.cache_variables["MEGACPP_CUDA"] = "OFF"
        tc.cache_variables["MEGACPP_MPI"] = False
        tc.cache_variables["MEGACPP_INSTALL"] = True
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        if self.options.examples:
            cmake.build()

    def package(self):
        CMake(self).install()  # the LICENSE goes to share/doc/megacpp too
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))

    def package_info(self):
        # CMake: megacpp's own config in share/cmake/megacpp, found through CMAKE_PREFIX_PATH.
        self.cpp_info.set_property("cmake_find_mode", "none")

        openmp_flags = ["-fopenmp"] if str(self.settings.compiler) in ("gcc", "clang") else []
        core = self.cpp_info.components["core"]
        core.builddirs = ["."]  # the package root joins CMAKE_PREFIX_PATH (CMakeToolchain)
        core.requires = ["eigen::eigen"]
        core.libdirs = []
        core.bindirs = []
        core.cxxflags = openmp_flags
        core.sharedlinkflags = openmp_flags
        core.exelinkflags = openmp_flags
        if self.options.cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.requires = ["core"]
            cuda.system_libs = ["cudart", "cublas"]
            cuda.libdirs = []
            cuda.bindirs = []
        if self.options.mpi:
            # MPI's flags come from its compiler wrapper (mpicxx) or CMake's FindMPI: there is no
            # portable library list to declare here.
            mpi = self.cpp_info.components["mpi"]
            mpi.requires = ["core"]
            mpi.libdirs = []
            mpi.bindirs = []
