# -march=native for the project's own binaries, and the CPU's instruction set in ccache's key.
#
# -march=native is the same text on every machine but a different instruction set on each CPU, and
# ccache keys an object on the command line's text: ccache 4.7 (Debian 12) hashes the argument,
# not what it resolves to (github.com/ccache/ccache/issues/824). A cache shared between machines
# whose CPUs differ (an AVX-512 Intel, an AVX2 or an AVX512-BF16 AMD) would then hand one CPU's
# objects to the other, and a binary linked from them stops on SIGILL. A -D in the flags would not
# help: ccache's preprocessor mode leaves -D out of the key, since the preprocessed text shows its
# effect, and the code never reads such a macro. So the project's own ccache launcher hashes one
# more file, through ccache's extra_files_to_hash (CCACHE_EXTRAFILES; ccache.dev/manual.html): what
# -march=native predefines here (every __AVX512F__, __AVX512BF16__, __AMX_TILE__, ... and the
# compiler's own macros). Objects are shared only between machines on which native means the same.
# A launcher given by the user (-DCMAKE_CXX_COMPILER_LAUNCHER) is left as it is: with one, use
# MEGACPP_NATIVE=OFF, or a cache per CPU.
function(megacpp_native_flags target)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -march=native -dM -E -x c++ /dev/null
                  OUTPUT_VARIABLE native_macros RESULT_VARIABLE native_status ERROR_VARIABLE native_error)
  if(NOT native_status EQUAL 0)
    message(FATAL_ERROR "megacpp: ${CMAKE_CXX_COMPILER} -march=native failed (${native_status}): ${native_error}"
                        "Configure with -DMEGACPP_NATIVE=OFF for portable binaries.")
  endif()
  target_compile_options(${target} INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)

  # The vector extensions it turned on, for the configure log: which build this is.
  string(REGEX MATCHALL "#define __(AVX[A-Z0-9_]*|AMX[A-Z0-9_]*|FMA|F16C)__ 1" native_features "${native_macros}")
  string(REGEX REPLACE "#define __([A-Z0-9_]+)__ 1" "\\1" native_features "${native_features}")
  list(SORT native_features)
  string(REPLACE ";" " " native_features "${native_features}")
  message(STATUS "megacpp: -march=native here: ${native_features}")

  if(MEGACPP_CCACHE AND "${CMAKE_CXX_COMPILER_LAUNCHER}" STREQUAL "${MEGACPP_CCACHE}")
    set(isa_file "${CMAKE_BINARY_DIR}/megacpp-native-isa.txt")
    file(WRITE "${isa_file}" "${native_macros}")
    set(extra_files "${isa_file}")
    if(DEFINED ENV{CCACHE_EXTRAFILES} AND NOT "$ENV{CCACHE_EXTRAFILES}" STREQUAL "")
      set(extra_files "$ENV{CCACHE_EXTRAFILES}:${isa_file}")  # the user's own, kept
    endif()
    set(CMAKE_CXX_COMPILER_LAUNCHER "${CMAKE_COMMAND};-E;env;CCACHE_EXTRAFILES=${extra_files};${MEGACPP_CCACHE}"
        PARENT_SCOPE)
  endif()
endfunction()
