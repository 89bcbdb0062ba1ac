// read_direct: the NVMe tier's reader. Reads a model file into its image with O_DIRECT through
// io_uring (liburing): `depth` reads of `block` bytes in flight, each landing straight in the
// image's page-aligned memory (no bounce buffer, no page cache), so one thread keeps the drive's
// queue full while the verify pool hashes completed chunks on the other cores.
//
// Only chunks that are not ready and that `want` selects (all when empty) are read. Each is
// verified; a match is marked ready, a mismatch is left out and reported in `corrupt` (the caller
// fetches it again from another tier, or fails the image). Filesystems without O_DIRECT (tmpfs)
// are read through the page cache instead, with the same pipeline (`DirectReadStats::direct`).
// Where io_uring is refused (a container runtime's default seccomp profile, an old kernel) the
// blocks are read with pread, one at a time (`DirectReadStats::io_uring`).
//
// Thread-safety: one call per image at a time; it blocks its thread until every read and hash it
// started has finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/model_image.h"
#include "store/verify_pool.h"

namespace uma::store {

struct DirectReadOptions {
  int depth = 8;                   // reads in flight
  std::uint64_t block = 4ull << 20;  // bytes a read (a multiple of 4096; a chunk is cut in blocks)
  const std::atomic<bool>* cancel = nullptr;  // set: no new reads; the call ends with kShuttingDown
  bool io_uring = true;  // false: pread, one block at a time (what is done where io_uring is refused)
};

struct DirectReadStats {
  std::uint64_t bytes_read = 0;
  std::uint64_t chunks_ok = 0;
  bool direct = true;  // false: the file system refused O_DIRECT and the page cache was used
  bool io_uring = true;  // false: io_uring was refused (seccomp, an old kernel) or not asked for: pread
};

Status read_direct(const std::string& path, const std::shared_ptr<ModelImage>& image, VerifyPool& pool,
                   const DirectReadOptions& options, const std::vector<std::uint8_t>& want,
                   std::vector<std::size_t>* corrupt, DirectReadStats* stats);

}  // namespace uma::store
