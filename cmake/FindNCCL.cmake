# FindNCCL.cmake: finds NVIDIA's NCCL, which ships no CMake config of its own.
#
# Looks under NCCL_ROOT (variable or environment), the CUDA toolkit (CUDAToolkit_ROOT, CUDA_PATH,
# /usr/local/cuda: CUDA 13 bundles nccl.h and libnccl.so there) and the system paths (Debian's
# libnccl-dev). Result variables: NCCL_FOUND, NCCL_VERSION, NCCL_INCLUDE_DIRS, NCCL_LIBRARIES.
# Imported target: NCCL::NCCL. Set NCCL_USE_STATIC=ON to prefer libnccl_static.a.

set(_nccl_hints)
foreach(_nccl_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}"
                            "$ENV{CUDA_PATH}" "${CUDAToolkit_LIBRARY_ROOT}" /usr/local/cuda)
  if(_nccl_root)
    list(APPEND _nccl_hints "${_nccl_root}")
  endif()
endforeach()

find_path(NCCL_INCLUDE_DIR NAMES nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
if(NCCL_USE_STATIC)
  set(_nccl_names nccl_static nccl)
else()
  set(_nccl_names nccl nccl_static)
endif()
find_library(NCCL_LIBRARY NAMES ${_nccl_names} HINTS ${_nccl_hints}
             PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu lib/aarch64-linux-gnu targets/x86_64-linux/lib)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part}[ \t]+([0-9]+)" _match "${_nccl_version_lines}")
    set(_nccl_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT _nccl_MAJOR STREQUAL "")
    set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS "${NCCL_INCLUDE_DIR}")
  set(NCCL_LIBRARIES "${NCCL_LIBRARY}")
  if(NOT TARGET NCCL::NCCL)
    add_library(NCCL::NCCL UNKNOWN IMPORTED)
    set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
unset(_nccl_hints)
unset(_nccl_names)
unset(_nccl_version_lines)
