# Included into llama.cpp's own configure by scripts/llama.sh (CMAKE_PROJECT_INCLUDE): its `common`
# library compiles in unity batches. Its ~50 files each parse and instantiate nlohmann/json and the
# Jinja engine on their own; in batches of 8 the library takes a fraction of the compile time
# (setup builds llama.cpp on every fresh machine and in CI). llama.cpp's own `llama` target is
# already a unity build; the one file of `common` that cannot share a batch (json.cpp specialises
# a template that a file before it instantiates) stays on its own.
if(NOT DEFINED UMA_LLAMA_UNITY_DEFERRED)
  set(UMA_LLAMA_UNITY_DEFERRED ON)
  function(uma_llama_common_unity)
    if(TARGET llama-common)
      set_target_properties(llama-common PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
      set_source_files_properties(${CMAKE_SOURCE_DIR}/common/json.cpp TARGET_DIRECTORY llama-common
                                  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL uma_llama_common_unity)
endif()
