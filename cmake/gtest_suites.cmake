# uma_gtest_suites(TARGET [LABELS ...]): one ctest test per gtest suite of TARGET, named "Suite.*",
# running `TARGET --gtest_filter=Suite.*`. For a binary of many millisecond tests: one process per
# test (gtest_discover_tests) spends more on process start than on the tests, most of all under the
# sanitizers (~0.2 s a start under ASan, 377 unit tests). The list is read from the built binary
# (--gtest_list_tests) after each link, as gtest_discover_tests does; ctest includes it.
#
# Script mode (after a link): cmake -D UMA_SUITES_EXE=... -D UMA_SUITES_OUT=... -D UMA_SUITES_LABELS=...
#   -P gtest_suites.cmake writes the add_test lines to UMA_SUITES_OUT.
if(CMAKE_SCRIPT_MODE_FILE)
  execute_process(COMMAND "${UMA_SUITES_EXE}" --gtest_list_tests RESULT_VARIABLE rc OUTPUT_VARIABLE listing
                  TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${UMA_SUITES_EXE} --gtest_list_tests failed (${rc}):\n${listing}")
  endif()
  string(REPLACE "\n" ";" lines "${listing}")
  set(out "")
  foreach(line IN LISTS lines)
    # A suite line starts in column 0 and ends its name with '.'; test lines are indented.
    if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.")
      set(suite "${CMAKE_MATCH_1}")
      if(suite MATCHES "^DISABLED_")
        continue()
      endif()
      string(APPEND out "add_test([=[${suite}.*]=] [==[${UMA_SUITES_EXE}]==] [=[--gtest_filter=${suite}.*]=])\n")
      string(APPEND out "set_tests_properties([=[${suite}.*]=] PROPERTIES LABELS [=[${UMA_SUITES_LABELS}]=])\n")
    endif()
  endforeach()
  file(WRITE "${UMA_SUITES_OUT}" "${out}")
  return()
endif()

function(uma_gtest_suites target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "LABELS")
  set(list_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
                     COMMAND ${CMAKE_COMMAND} -D "UMA_SUITES_EXE=$<TARGET_FILE:${target}>"
                             -D "UMA_SUITES_OUT=${list_file}" -D "UMA_SUITES_LABELS=${arg_LABELS}"
                             -P "${CMAKE_SOURCE_DIR}/cmake/gtest_suites.cmake"
                     VERBATIM)
  # Before the first build the list does not exist: one failing test says so, as gtest_discover_tests does.
  file(WRITE "${include_file}"
       "if(EXISTS [==[${list_file}]==])\n  include([==[${list_file}]==])\nelse()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
