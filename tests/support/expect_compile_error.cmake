# Builds TARGET in BUILD_DIR, which must fail to compile, and checks the diagnostics: they contain
# EXPECT_ID (the static_assert id) and EXPECT_CONTEXT (what the instantiation must name), and
# at most ERRORS lines of the form "file:line:col: error: ..." (GCC and Clang). At most, not exactly:
# where two static_asserts of one class fail, GCC reports both and clang stops at the first.
# Usage: cmake -DBUILD_DIR=... -DTARGET=... -DEXPECT_ID=... -DEXPECT_CONTEXT=... -DERRORS=n -P this-file
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(REGEX MATCHALL ":[0-9]+:[0-9]+: error: " errors "${out}")
list(LENGTH errors n_errors)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must not")
endif()
string(FIND "${out}" "${EXPECT_ID}" at_id)
string(FIND "${out}" "${EXPECT_CONTEXT}" at_context)
if(at_id EQUAL -1 OR at_context EQUAL -1)
  message(FATAL_ERROR "${TARGET} failed to compile, but its diagnostics lack '${EXPECT_ID}' or '${EXPECT_CONTEXT}'")
endif()
if(n_errors GREATER ERRORS)
  message(FATAL_ERROR "${TARGET}: ${n_errors} errors where at most ${ERRORS} were expected (a cascade hides the message)")
endif()
message("${TARGET}: failed to compile as expected: ${EXPECT_ID}, ${EXPECT_CONTEXT}, ${n_errors} error(s)")
