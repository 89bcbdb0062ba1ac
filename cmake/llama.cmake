# Imports the pinned llama.cpp build that scripts/llama.sh keeps in a per-machine cache outside git.
# Its root is LLAMA_CPP_ROOT (default: what `scripts/llama.sh --print-root` prints). Nothing from
# llama.cpp is copied into this tree; headers and shared libraries are used where they were built.
if(NOT LLAMA_CPP_ROOT)
  execute_process(COMMAND ${CMAKE_SOURCE_DIR}/scripts/llama.sh --print-root
                  OUTPUT_VARIABLE _root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "cannot locate the llama.cpp cache; run scripts/setup.sh first")
  endif()
  set(LLAMA_CPP_ROOT ${_root} CACHE PATH "llama.cpp cache folder (src/ and build/)")
endif()
set(LLAMA_CPP_SRC ${LLAMA_CPP_ROOT}/src)
set(LLAMA_CPP_BIN ${LLAMA_CPP_ROOT}/build/bin)
foreach(_f ${LLAMA_CPP_SRC}/include/llama.h ${LLAMA_CPP_BIN}/libllama.so ${LLAMA_CPP_BIN}/libggml.so)
  if(NOT EXISTS ${_f})
    message(FATAL_ERROR "${_f} is missing; run scripts/setup.sh to fetch and build llama.cpp")
  endif()
endforeach()

function(_uma_import name lib)
  add_library(${name} SHARED IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION ${LLAMA_CPP_BIN}/${lib})
endfunction()
_uma_import(uma_ggml_base libggml-base.so)
_uma_import(uma_ggml_core libggml.so)
_uma_import(uma_llama_lib libllama.so)

add_library(llama_cpp INTERFACE)
# SYSTEM: llama.cpp's headers are not ours to warn about.
target_include_directories(llama_cpp SYSTEM INTERFACE ${LLAMA_CPP_SRC}/include ${LLAMA_CPP_SRC}/ggml/include)
target_link_libraries(llama_cpp INTERFACE uma_llama_lib uma_ggml_core uma_ggml_base)
add_library(llama::llama ALIAS llama_cpp)

# llama.cpp's `common` library (chat templates through its Jinja engine, JSON schema to grammar,
# tool-call parsing), built by scripts/llama.sh from the same source. Only src/chat/ includes it.
if(NOT EXISTS ${LLAMA_CPP_BIN}/libllama-common.so)
  message(FATAL_ERROR "${LLAMA_CPP_BIN}/libllama-common.so is missing; run scripts/setup.sh to build llama.cpp")
endif()
_uma_import(uma_llama_common_lib libllama-common.so)
add_library(llama_cpp_common INTERFACE)
target_include_directories(llama_cpp_common SYSTEM INTERFACE ${LLAMA_CPP_SRC}/common ${LLAMA_CPP_SRC}/vendor)
target_link_libraries(llama_cpp_common INTERFACE uma_llama_common_lib llama_cpp)
add_library(llama::common ALIAS llama_cpp_common)

# llama.cpp's libmtmd (vision projectors: images into a text model's input embeddings), built by
# scripts/llama.sh from the same source. Only src/runtime/ includes it.
if(NOT EXISTS ${LLAMA_CPP_BIN}/libmtmd.so)
  message(FATAL_ERROR "${LLAMA_CPP_BIN}/libmtmd.so is missing; run scripts/setup.sh to build llama.cpp")
endif()
_uma_import(uma_mtmd_lib libmtmd.so)
add_library(llama_cpp_mtmd INTERFACE)
target_include_directories(llama_cpp_mtmd SYSTEM INTERFACE ${LLAMA_CPP_SRC}/tools/mtmd)
target_link_libraries(llama_cpp_mtmd INTERFACE uma_mtmd_lib llama_cpp)
add_library(llama::mtmd ALIAS llama_cpp_mtmd)
set(CMAKE_BUILD_RPATH ${LLAMA_CPP_BIN})
if(UMA_DEPS_LIBDIR)
  list(APPEND CMAKE_BUILD_RPATH ${UMA_DEPS_LIBDIR})
endif()
# The tokenizer every generated model carries (uma-mkmodel reads it).
set(UMA_VOCAB_GGUF ${LLAMA_CPP_SRC}/models/ggml-vocab-llama-spm.gguf CACHE FILEPATH "")
