# run-port.cmake: runs ports/megacpp/portfile.cmake without vcpkg, by defining the vcpkg helper
# functions the port calls with vcpkg's behaviour for this case (header-only, release-only, Linux).
# vcpkg cannot be installed on megacpp's CI machines; this runs the port's own CMake steps with
# the port's own options, instead of a hand-copied list of them.
#
#   cmake -DPORT_DIR=ports/megacpp -DFEATURES="core;mpi" -DWORK_DIR=build/packaging/vcpkg \
#         -P packaging/vcpkg/run-port.cmake
#
# Result: a vcpkg-style package tree in ${WORK_DIR}/packages/megacpp_x64-linux (include/,
# share/megacpp/ after vcpkg_cmake_config_fixup, share/megacpp/copyright), checked the way vcpkg's
# post-build checks would (no debug/, copyright present, no absolute build paths in any file).
#
# Not emulated: vcpkg's toolchain file, the dependency ports (eigen3, cuda, mpi come from the
# system), binary caching, and the port's behaviour on Windows/macOS triplets.
cmake_minimum_required(VERSION 3.25)

foreach(required PORT_DIR WORK_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run-port.cmake: pass -D${required}=...")
  endif()
endforeach()
if(NOT DEFINED FEATURES)
  set(FEATURES core)
endif()
set(TARGET_TRIPLET x64-linux)
get_filename_component(PORT_DIR "${PORT_DIR}" ABSOLUTE)
get_filename_component(WORK_DIR "${WORK_DIR}" ABSOLUTE)
get_filename_component(PORT "${PORT_DIR}" NAME)
set(CURRENT_PACKAGES_DIR "${WORK_DIR}/packages/${PORT}_${TARGET_TRIPLET}")
set(CURRENT_BUILDTREES_DIR "${WORK_DIR}/buildtrees/${PORT}")
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}" "${CURRENT_BUILDTREES_DIR}")
file(MAKE_DIRECTORY "${CURRENT_PACKAGES_DIR}" "${CURRENT_BUILDTREES_DIR}")

# ---- the manifest: features exist, version agrees with the project's ---------------------------
file(READ "${PORT_DIR}/vcpkg.json" manifest)
string(JSON manifest_name GET "${manifest}" name)
string(JSON VERSION GET "${manifest}" version-semver)
if(NOT manifest_name STREQUAL PORT)
  message(FATAL_ERROR "vcpkg.json names '${manifest_name}', the port directory is '${PORT}'")
endif()
foreach(feature IN LISTS FEATURES)
  if(NOT feature STREQUAL "core")
    string(JSON feature_description ERROR_VARIABLE missing GET "${manifest}" features ${feature} description)
    if(missing)
      message(FATAL_ERROR "feature '${feature}' is not declared in ${PORT_DIR}/vcpkg.json")
    endif()
  endif()
endforeach()
file(READ "${PORT_DIR}/../../CMakeLists.txt" top_cmakelists)
string(REGEX MATCH "project\\(megacpp VERSION ([0-9.]+)" _ "${top_cmakelists}")
if(NOT CMAKE_MATCH_1 STREQUAL VERSION)
  message(FATAL_ERROR "vcpkg.json version ${VERSION} differs from CMakeLists.txt's project version ${CMAKE_MATCH_1}")
endif()

# ---- the vcpkg helpers the port uses -----------------------------------------------------------
function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "OUT_FEATURE_OPTIONS" "FEATURES;INVERTED_FEATURES")
  set(options)
  list(LENGTH arg_FEATURES n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET arg_FEATURES ${i} feature)
    list(GET arg_FEATURES ${j} variable)
    if(feature IN_LIST FEATURES)
      list(APPEND options "-D${variable}=ON")
    else()
      list(APPEND options "-D${variable}=OFF")
    endif()
  endforeach()
  set(${arg_OUT_FEATURE_OPTIONS} "${options}" PARENT_SCOPE)
endfunction()

function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE;OPTIONS_DEBUG;MAYBE_UNUSED_VARIABLES")
  set(build_dir "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel")
  set(generator "Unix Makefiles")
  find_program(ninja ninja)
  if(ninja)
    set(generator Ninja)  # vcpkg's default generator
  endif()
  # The options vcpkg itself passes that matter on Linux (its toolchain file aside).
  set(command "${CMAKE_COMMAND}" -S "${arg_SOURCE_PATH}" -B "${build_dir}" -G "${generator}"
      -DCMAKE_BUILD_TYPE=Release "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}"
      -DCMAKE_INSTALL_LIBDIR:STRING=lib -DCMAKE_INSTALL_BINDIR:STRING=bin
      -DCMAKE_EXPORT_NO_PACKAGE_REGISTRY=ON -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
      -DCMAKE_ERROR_ON_ABSOLUTE_INSTALL_DESTINATION=ON -DFETCHCONTENT_FULLY_DISCONNECTED=ON
      -DVCPKG_TARGET_TRIPLET=${TARGET_TRIPLET} ${arg_OPTIONS} ${arg_OPTIONS_RELEASE})
  message(STATUS "vcpkg_cmake_configure: ${command}")
  execute_process(COMMAND ${command} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  file(WRITE "${CURRENT_BUILDTREES_DIR}/config-${TARGET_TRIPLET}-rel-out.log" "${out}\n${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "vcpkg_cmake_configure failed:\n${out}\n${err}")
  endif()
  # vcpkg warns about options of the port that the project ignored (a stale option, a typo).
  if(err MATCHES "Manually-specified variables were not used by the project:(.*)")
    set(unused_list "${CMAKE_MATCH_1}")
    foreach(option IN LISTS arg_OPTIONS arg_OPTIONS_RELEASE)
      if(NOT option MATCHES "^-D([A-Za-z0-9_]+)[:=]")
        continue()
      endif()
      set(name "${CMAKE_MATCH_1}")
      if(NOT name IN_LIST arg_MAYBE_UNUSED_VARIABLES AND unused_list MATCHES "[ \n]${name}[ \n]")
        message(WARNING "vcpkg_cmake_configure: the project ignored the port's option ${option}")
      endif()
    endforeach()
  endif()
  set_property(GLOBAL PROPERTY megacpp_vcpkg_build_dir "${build_dir}")
endfunction()

function(vcpkg_cmake_install)
  get_property(build_dir GLOBAL PROPERTY megacpp_vcpkg_build_dir)
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${build_dir}" --target install
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  file(WRITE "${CURRENT_BUILDTREES_DIR}/install-${TARGET_TRIPLET}-rel-out.log" "${out}\n${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "vcpkg_cmake_install failed:\n${out}\n${err}")
  endif()
endfunction()

# Moves the CMake package files to share/<package> and rewrites the relative paths they compute
# their prefix from, as vcpkg-cmake-config's vcpkg_cmake_config_fixup does.
function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "PACKAGE_NAME;CONFIG_PATH" "")
  if(NOT arg_PACKAGE_NAME)
    set(arg_PACKAGE_NAME "${PORT}")
  endif()
  if(NOT arg_CONFIG_PATH)
    set(arg_CONFIG_PATH "share/${arg_PACKAGE_NAME}")
  endif()
  set(from "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}")
  set(to "${CURRENT_PACKAGES_DIR}/share/${arg_PACKAGE_NAME}")
  if(NOT IS_DIRECTORY "${from}")
    message(FATAL_ERROR "vcpkg_cmake_config_fixup: '${arg_CONFIG_PATH}' does not exist in the package")
  endif()
  if(NOT from STREQUAL to)
    file(GLOB files "${from}/*")
    file(MAKE_DIRECTORY "${to}")
    foreach(f IN LISTS files)
      get_filename_component(name "${f}" NAME)
      file(RENAME "${f}" "${to}/${name}")
    endforeach()
    # Remove the now-empty directories up to the prefix (share/cmake/megacpp, share/cmake).
    set(dir "${from}")
    while(NOT dir STREQUAL CURRENT_PACKAGES_DIR)
      file(GLOB left "${dir}/*")
      if(left)
        break()
      endif()
      file(REMOVE "${dir}")
      file(REMOVE_RECURSE "${dir}")
      get_filename_component(dir "${dir}" DIRECTORY)
    endwhile()
  endif()
  file(GLOB cmake_files "${to}/*.cmake")
  foreach(f IN LISTS cmake_files)
    file(READ "${f}" contents)
    # install(EXPORT) files: _IMPORT_PREFIX climbs from the file's directory; share/<pkg> is 2 deep.
    string(REGEX REPLACE
           "get_filename_component\\(_IMPORT_PREFIX \"\\\${CMAKE_CURRENT_LIST_FILE}\" PATH\\)(\nget_filename_component\\(_IMPORT_PREFIX \"\\\${_IMPORT_PREFIX}\" PATH\\))*"
           "get_filename_component(_IMPORT_PREFIX \"\${CMAKE_CURRENT_LIST_FILE}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)"
           contents "${contents}")
    # configure_package_config_file: PACKAGE_PREFIX_DIR climbs by ../ from the config's directory.
    string(REGEX REPLACE
           "get_filename_component\\(PACKAGE_PREFIX_DIR \"\\\${CMAKE_CURRENT_LIST_DIR}/(\\.\\./)*\" ABSOLUTE\\)"
           "get_filename_component(PACKAGE_PREFIX_DIR \"\${CMAKE_CURRENT_LIST_DIR}/../../\" ABSOLUTE)"
           contents "${contents}")
    file(WRITE "${f}" "${contents}")
  endforeach()
endfunction()

function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "FILE_LIST")
  set(text "")
  foreach(f IN LISTS arg_FILE_LIST)
    file(READ "${f}" part)
    string(APPEND text "${part}")
  endforeach()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "${text}")
endfunction()

# ---- run the port --------------------------------------------------------------------------------
message(STATUS "run-port: ${PORT} ${VERSION} [${FEATURES}] -> ${CURRENT_PACKAGES_DIR}")
set(CMAKE_CURRENT_LIST_DIR "${PORT_DIR}")  # what the portfile sees under vcpkg
include("${PORT_DIR}/portfile.cmake")

# ---- vcpkg's post-build checks that apply to a header-only port ---------------------------------
set(problems)
if(EXISTS "${CURRENT_PACKAGES_DIR}/debug")
  list(APPEND problems "debug/ exists in a release-only (VCPKG_BUILD_TYPE release) package")
endif()
if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright")
  list(APPEND problems "share/${PORT}/copyright is missing")
else()
  file(READ "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" _copyright)
  file(READ "${PORT_DIR}/../../LICENSE" _license)
  if(NOT _copyright STREQUAL _license)
    list(APPEND problems "share/${PORT}/copyright is not the source tree's LICENSE")
  endif()
endif()
if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/share/${PORT}/${PORT}Config.cmake")
  list(APPEND problems "share/${PORT}/${PORT}Config.cmake is missing (vcpkg_cmake_config_fixup)")
endif()
if(NOT IS_DIRECTORY "${CURRENT_PACKAGES_DIR}/include/megacpp")
  list(APPEND problems "include/megacpp is missing")
endif()
if(EXISTS "${CURRENT_PACKAGES_DIR}/share/cmake")
  list(APPEND problems "share/cmake/ is left behind after vcpkg_cmake_config_fixup")
endif()
get_filename_component(source_dir "${PORT_DIR}/../.." ABSOLUTE)
file(GLOB_RECURSE installed "${CURRENT_PACKAGES_DIR}/*")
foreach(f IN LISTS installed)
  file(READ "${f}" contents)
  foreach(absolute IN ITEMS "${CURRENT_PACKAGES_DIR}" "${CURRENT_BUILDTREES_DIR}" "${source_dir}")
    string(FIND "${contents}" "${absolute}" at)
    if(NOT at EQUAL -1)
      file(RELATIVE_PATH rel "${CURRENT_PACKAGES_DIR}" "${f}")
      list(APPEND problems "${rel} contains the absolute path ${absolute}")
    endif()
  endforeach()
endforeach()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "run-port: post-build checks failed:\n  ${text}")
endif()
list(LENGTH installed n)
message(STATUS "run-port: ${PORT} installed ${n} files; post-build checks passed")
