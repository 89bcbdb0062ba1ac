# Libraries from an offline bundle: scripts/setup.sh --from-bundle unpacks the Debian packages a
# machine lacks into a prefix in the per-machine cache (scripts/llama.sh --print-prefix says where;
# nothing when it did not). Search there first, and find its shared libraries (spdlog, fmt) at run
# time through the build's RPATH, so nothing needs LD_LIBRARY_PATH.
if(NOT DEFINED UMA_DEPS_PREFIX)
  execute_process(COMMAND ${CMAKE_SOURCE_DIR}/scripts/llama.sh --print-prefix
                  OUTPUT_VARIABLE _prefix OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(UMA_DEPS_PREFIX "${_prefix}" CACHE PATH "Debian packages unpacked from an offline bundle (empty: none)")
endif()
if(UMA_DEPS_PREFIX)
  message(STATUS "uma: libraries from the offline bundle's prefix ${UMA_DEPS_PREFIX}")
  list(PREPEND CMAKE_PREFIX_PATH ${UMA_DEPS_PREFIX}/usr)
  # Debian's BoostConfig names /usr/include; the headers are in the prefix.
  set(Boost_INCLUDE_DIR ${UMA_DEPS_PREFIX}/usr/include)
  set(UMA_DEPS_LIBDIR ${UMA_DEPS_PREFIX}/usr/lib/x86_64-linux-gnu)
endif()
# Debian's libssl-dev keeps opensslconf.h under the multiarch include folder.
if(UMA_DEPS_PREFIX AND EXISTS ${UMA_DEPS_PREFIX}/usr/include/openssl)
  set(OPENSSL_ROOT_DIR ${UMA_DEPS_PREFIX}/usr)
  include_directories(SYSTEM ${UMA_DEPS_PREFIX}/usr/include/x86_64-linux-gnu)
endif()
