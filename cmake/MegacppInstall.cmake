# Install rules and the exported CMake package, so that a consumer writes
#
#   find_package(megacpp REQUIRED)                    # or COMPONENTS cuda mpi nccl
#   target_link_libraries(app PRIVATE megacpp::megacpp)
#
# What is installed: every header (include/megacpp and each backends/*/include, the CUDA backend's
# too, whether or not nvcc exists here: installing headers never needs CUDA), the exported target
# megacpp::megacpp (megacppTargets.cmake), megacppConfig.cmake, megacppConfigVersion.cmake and
# FindNCCL.cmake, and the LICENSE (share/doc/megacpp/LICENSE). megacpp::cuda, megacpp::mpi and megacpp::nccl are not exported from this build:
# megacppConfig.cmake defines them in the consumer's project when asked for, from what the
# consumer's machine has, so one installed package serves CPU-only and CUDA consumers alike.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# A top-level build installs; a project that pulls megacpp in with add_subdirectory/FetchContent
# only gets install rules for megacpp if it asks (for example to export its own targets).
option(MEGACPP_INSTALL "Generate megacpp's install rules" ${PROJECT_IS_TOP_LEVEL})
if(NOT MEGACPP_INSTALL)
  return()
endif()

# Header-only, so the package is architecture-independent: it goes under share/, not lib/.
set(MEGACPP_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/megacpp" CACHE STRING
    "Where megacppConfig.cmake is installed, relative to the prefix")

# ---- headers ------------------------------------------------------------------------------------
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh" PATTERN "*.h")
file(GLOB _megacpp_backend_includes LIST_DIRECTORIES true "${PROJECT_SOURCE_DIR}/backends/*/include")
foreach(_dir IN LISTS _megacpp_backend_includes)
  if(IS_DIRECTORY "${_dir}")
    install(DIRECTORY "${_dir}/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
            FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh" PATTERN "*.h")
  endif()
endforeach()
unset(_megacpp_backend_includes)

# ---- the exported target ------------------------------------------------------------------------
# megacpp's include directories already name $<INSTALL_INTERFACE:include>; a prefix laid out with
# another include directory gets that one added.
set(_megacpp_includes)
if(NOT CMAKE_INSTALL_INCLUDEDIR STREQUAL "include")
  set(_megacpp_includes INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
endif()
install(TARGETS megacpp EXPORT megacppTargets ${_megacpp_includes})
install(EXPORT megacppTargets NAMESPACE megacpp:: DESTINATION "${MEGACPP_INSTALL_CMAKEDIR}")

# ---- config and version files -------------------------------------------------------------------
# Semantic versioning: before 1.0 a minor release may break the API, so 0.1.x accepts a request
# for 0.1 but not for 0.2; from 1.0 on, any 1.y satisfies a request for 1.x (SameMajorVersion).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_megacpp_compatibility SameMinorVersion)
else()
  set(_megacpp_compatibility SameMajorVersion)
endif()
set(_megacpp_config_dir "${PROJECT_BINARY_DIR}/megacpp-package")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/megacppConfig.cmake.in"
                              "${_megacpp_config_dir}/megacppConfig.cmake"
                              INSTALL_DESTINATION "${MEGACPP_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${_megacpp_config_dir}/megacppConfigVersion.cmake"
                                 VERSION "${PROJECT_VERSION}" COMPATIBILITY ${_megacpp_compatibility}
                                 ARCH_INDEPENDENT)
install(FILES "${_megacpp_config_dir}/megacppConfig.cmake" "${_megacpp_config_dir}/megacppConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake"
        DESTINATION "${MEGACPP_INSTALL_CMAKEDIR}")

# ---- the license --------------------------------------------------------------------------------
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DOCDIR}")  # share/doc/megacpp

unset(_megacpp_includes)
unset(_megacpp_compatibility)
unset(_megacpp_config_dir)
