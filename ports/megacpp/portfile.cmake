# vcpkg port of megacpp, meant as an overlay port used from a megacpp checkout:
#   vcpkg install megacpp[cuda,mpi] --overlay-ports=<megacpp>/ports
# The source is the checkout this port lives in. A registry port would fetch a release instead
# (vcpkg_from_github(OUT_SOURCE_PATH SOURCE_PATH REPO ... REF v${VERSION} SHA512 ...)).
# "supports": "linux" in vcpkg.json: the CPU backend maps files with mmap (POSIX) and needs an
# OpenMP compiler; nothing else is built or tested.
# vcpkg itself is not available on megacpp's CI machines: scripts/ci-packaging.sh runs this file
# through packaging/vcpkg/run-port.cmake, which stands in for vcpkg's helper functions.
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../..")

# Header-only: one (release) configuration is all there is to install.
set(VCPKG_BUILD_TYPE release)

# Features turn on the build-time checks for their dependencies (nvcc; MPI). Installed headers and
# CMake files are the same either way: consumers pick components in find_package(megacpp ...).
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda MEGACPP_CUDA
    mpi  MEGACPP_MPI
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DMEGACPP_BUILD_TESTS=OFF
    -DMEGACPP_BUILD_EXAMPLES=OFF
    -DMEGACPP_BUILD_BENCH=OFF
    -DMEGACPP_NATIVE=OFF
    -DMEGACPP_INSTALL=ON
    ${FEATURE_OPTIONS}
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME megacpp CONFIG_PATH share/cmake/megacpp)

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
# vcpkg's place for the license is share/megacpp/copyright; drop the share/doc copy of cmake --install.
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/doc")
