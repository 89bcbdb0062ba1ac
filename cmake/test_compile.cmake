# How the test executables compile: their own code is the cheapest part of a test run and the
# costliest part of a build, so it is compiled for compile time, not run time.
# - -O0: the code under test (the libraries, llama.cpp) keeps its optimisation level; the tests'
#   own code at -O2 took three times the compile time (an end-to-end batch: 55.6 s at -O2, 18.8 s
#   at -O0, clang) for a run time that is spent waiting on the daemons.
# - A precompiled header of the headers every test file parses (GoogleTest, nlohmann/json, the
#   standard library): ~5 s of each batch's 12 s of parsing.
function(uma_test_compile target)
  target_compile_options(${target} PRIVATE -O0)
  target_precompile_headers(${target} PRIVATE
    <gtest/gtest.h> <nlohmann/json.hpp>
    <algorithm> <atomic> <chrono> <filesystem> <fstream> <functional> <map> <memory> <mutex>
    <set> <sstream> <string> <thread> <vector>)
endfunction()
