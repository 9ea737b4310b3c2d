"""test_package: builds tests/consumer's program (a 2-layer MLP that must learn) against the conan
package, plus a check of each component the package was created with (-o megacpp/*:mpi=True ...)."""
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class MegacppTestPackageConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def _components(self):
        options = self.dependencies["megacpp"].options
        return [name for name in ("cuda", "mpi") if options.get_safe(name)]

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["MEGACPP_TEST_COMPONENTS"] = ";".join(self._components())
        if "cuda" in self._components():
            # conan_toolchain.cmake sets CMAKE_CXX_STANDARD 20 and CMake falls back to it for CUDA,
            # but CMake before 3.25.2 has no C++20 flag for nvcc, so enable_language(CUDA) fails
            # in its own compiler check. Start CUDA at C++17; megacpp::cuda raises it to C++20 (its
            # compile feature cuda_std_20, which megacppConfig.cmake teaches old CMake).
            tc.variables["CMAKE_CUDA_STANDARD"] = "17"
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if not can_run(self):
            return
        programs = ["test_package"] + [f"test_package_{name}" for name in self._components()]
        for program in programs:
            self.run(os.path.join(self.cpp.build.bindir, program), env="conanrun")
