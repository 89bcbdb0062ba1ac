// fetch_remote: the remote tier. Fills a model image's missing chunks from an HTTP(S) URL that
// serves the GGUF file with Range support (nginx, S3, a CDN), several Range requests in flight over
// one libcurl multi handle (connections reused, as a pool), each response written straight into
// the image's memory at its chunk's offset.
//
// Every chunk is verified (VerifyPool) before it counts: `on_verified(i, bytes)` runs first (the
// NVMe tier writes the chunk to its file there, so a cold start streams into the load and onto
// disk at once), then the chunk is marked ready. `on_verified` runs on verify-pool threads,
// concurrently for different chunks: it must be thread-safe (pwrite is). A chunk whose hash does not match is fetched
// again (stats.corrupt_chunks); a transfer that breaks (connection reset, server restarted, a
// stalled link below `low_speed_bytes_s` for `low_speed_time`) resumes from the byte it had
// reached (stats.resumed_transfers, stats.resumed_bytes_kept), after a backoff that doubles from
// 50 ms up to 2 s. A chunk fails the call and the image (`image.fail`, a kIo status that says
// why) when its attempts that delivered nothing (reset by any progress) plus its hash mismatches
// (never reset: a corrupt server on a flaky link must not loop for ever) reach `max_attempts`;
// a 4xx answer, or a server whose file has another size, fails at once.
//
// Thread-safety: one call runs on the caller's thread (it drives the multi handle) plus the
// verify pool's threads; concurrent calls must fill different images.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "store/model_image.h"
#include "store/verify_pool.h"

namespace uma::store {

struct RemoteOptions {
  int connections = 8;          // Range requests in flight at once
  int max_attempts = 6;         // per chunk, consecutive failures that delivered nothing
  std::chrono::milliseconds connect_timeout{2000};
  std::int64_t low_speed_bytes_s = 1024;  // a transfer slower than this for low_speed_time breaks
  std::chrono::seconds low_speed_time{10};
  std::string bearer_token;     // sent as "Authorization: Bearer ..." when not empty
  const std::atomic<bool>* cancel = nullptr;  // set: the fetch stops (kShuttingDown) within a poll
};

struct RemoteStats {
  std::atomic<std::uint64_t> bytes_received{0};     // body bytes off the network, re-fetches included
  std::atomic<std::uint64_t> chunks_fetched{0};
  std::atomic<std::uint64_t> corrupt_chunks{0};     // fetched, failed verification, fetched again
  std::atomic<std::uint64_t> resumed_transfers{0};  // broken transfers continued from their last byte
  std::atomic<std::uint64_t> resumed_bytes_kept{0}; // bytes those did not fetch twice
};

using ChunkCallback = std::function<Status(std::size_t chunk, std::span<const std::uint8_t> bytes)>;

// False in a build without libcurl (fetch_remote then answers kUnavailable).
bool remote_tier_available();

// Fetches every chunk of `image` that is not ready yet. Returns when all are ready, or on failure.
Status fetch_remote(const std::string& url, const std::shared_ptr<ModelImage>& image, VerifyPool& pool,
                    const RemoteOptions& options, const ChunkCallback& on_verified, RemoteStats* stats);

}  // namespace uma::store
