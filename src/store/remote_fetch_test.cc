// fetch_remote against a real nginx on loopback (Range as shipped, limit_rate for a slow link,
// SIGKILL for a crash): whole fetches, a resumed interrupted download, corrupt chunks caught and
// fetched again, 4xx answers, a server that is down, a server that ignores Range, the bearer token.
#include "store/remote_fetch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "e2e/nginx_harness.h"

namespace uma::store {
namespace {

using test::NginxServer;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kChunk = 256 << 10;

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<std::size_t>(8, n - i));
  }
  return s;
}

// Writes through a temp file and rename: a request nginx already opened keeps the old bytes.
void put_file(const NginxServer& nginx, const std::string& name, const std::string& bytes) {
  const std::string path = nginx.root() + "/" + name, tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::filesystem::rename(tmp, path);
}

// What uma-store would write for a GGUF, built by hand for plain bytes (no tensors).
std::shared_ptr<const Manifest> manifest_for(const std::string& bytes, std::uint64_t chunk_bytes) {
  auto m = std::make_shared<Manifest>();
  m->id = "test-model";
  m->bytes = bytes.size();
  m->chunk_bytes = chunk_bytes;
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  for (std::uint64_t off = 0; off < bytes.size(); off += chunk_bytes) {
    m->chunks.push_back(sha256({p + off, std::min<std::uint64_t>(chunk_bytes, bytes.size() - off)}));
  }
  return m;
}

std::shared_ptr<ModelImage> image_for(const std::string& bytes, std::uint64_t chunk_bytes = kChunk) {
  Status s;
  auto image = ModelImage::create(manifest_for(bytes, chunk_bytes), nullptr, &s);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return image;
}

bool chunk_equals(ModelImage& image, const std::string& bytes, std::size_t i) {
  const auto c = image.chunk(i);
  return std::memcmp(c.data(), bytes.data() + image.manifest().chunk_offset(i), c.size()) == 0;
}

bool image_equals(const ModelImage& image, const std::string& bytes) {
  return std::memcmp(image.data(), bytes.data(), bytes.size()) == 0;
}

// Counts on_verified calls per chunk and checks each hands over the right bytes.
struct VerifiedLog {
  explicit VerifiedLog(const std::string& file) : file(file), calls(file.size() / kChunk + 1, 0) {}
  ChunkCallback callback() {
    return [this](std::size_t i, std::span<const std::uint8_t> b) {
      std::lock_guard lock(mu);
      ++calls.at(i);
      if (b.size() > file.size() - i * kChunk || std::memcmp(b.data(), file.data() + i * kChunk, b.size()) != 0) {
        ++wrong;
      }
      return Status{};
    };
  }
  const std::string& file;
  std::mutex mu;
  std::vector<int> calls;
  int wrong = 0;
};

template <typename Pred>
bool poll_until(Pred pred, std::chrono::seconds limit) {
  for (const auto end = Clock::now() + limit; Clock::now() < end;) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll interval, not a synchronisation
  }
  return pred();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TEST(RemoteFetch, FetchesEveryChunkOverFourConnections) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes((4u << 20) + 1234, 1);  // a short last chunk
  put_file(nginx, "model.gguf", file);
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteOptions opt;
  opt.connections = 4;
  RemoteStats stats;
  VerifiedLog log(file);
  const auto t0 = Clock::now();
  const Status s = fetch_remote(nginx.url("model.gguf"), image, pool, opt, log.callback(), &stats);
  std::printf("fetched %zu bytes in %.3f s\n", file.size(), seconds_since(t0));
  ASSERT_TRUE(s.ok()) << s.to_string();
  const std::size_t n = image->manifest().chunk_count();
  EXPECT_EQ(n, 17u);
  EXPECT_TRUE(image->complete());
  EXPECT_TRUE(image_equals(*image, file));
  EXPECT_EQ(stats.chunks_fetched, n);
  EXPECT_EQ(stats.bytes_received, file.size());
  EXPECT_EQ(stats.corrupt_chunks, 0u);
  EXPECT_EQ(stats.resumed_transfers, 0u);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(log.calls[i], 1) << "chunk " << i;
  EXPECT_EQ(log.wrong, 0);
}

TEST(RemoteFetch, FetchesOnlyTheChunksNotReady) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes(2u << 20, 2);
  put_file(nginx, "model.gguf", file);
  auto image = image_for(file);
  for (std::size_t i : {0u, 3u, 7u}) {  // as a faster tier would have left them
    std::memcpy(image->chunk(i).data(), file.data() + i * kChunk, kChunk);
    image->chunk_ready(i);
  }
  VerifyPool pool(2);
  RemoteStats stats;
  VerifiedLog log(file);
  const Status s = fetch_remote(nginx.url("model.gguf"), image, pool, RemoteOptions{}, log.callback(), &stats);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(image_equals(*image, file));
  EXPECT_EQ(stats.chunks_fetched, 5u);
  EXPECT_EQ(stats.bytes_received, file.size() - 3 * kChunk);
  EXPECT_EQ(log.calls[0] + log.calls[3] + log.calls[7], 0);
}

TEST(RemoteFetch, ResumesAnInterruptedDownloadAfterTheServerRestarts) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  // 256 KiB/s per request: each chunk takes ~1 s, 3 rounds of 4; the second round is mid-transfer
  // for about a second.
  NginxServer nginx({.limit_rate = "256k", .extra = ""});
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes(12 * kChunk, 3);
  put_file(nginx, "model.gguf", file);
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteOptions opt;
  opt.connections = 4;
  RemoteStats stats;
  Status result{ErrorCode::kInternal, "not run"};
  const auto t0 = Clock::now();
  std::thread fetcher([&] { result = fetch_remote(nginx.url("model.gguf"), image, pool, opt, nullptr, &stats); });

  ASSERT_TRUE(image->wait(0, 2 * kChunk).ok());
  // The second round has bytes in place but is not complete: a crash now breaks transfers mid-chunk.
  const bool mid = poll_until([&] { return stats.bytes_received > 4 * kChunk + (16 << 10); }, std::chrono::seconds(10));
  const auto t_kill = Clock::now();
  nginx.kill();
  const std::uint64_t before_restart = stats.bytes_received;
  const bool restarted = nginx.start();
  const double down = seconds_since(t_kill), killed_at = std::chrono::duration<double>(t_kill - t0).count();
  fetcher.join();
  std::printf("fetched %zu bytes in %.3f s; killed at %.3f s with %llu bytes in, down %.3f s; resumed %llu transfers "
              "keeping %llu bytes\n",
              file.size(), seconds_since(t0), killed_at, static_cast<unsigned long long>(before_restart), down,
              static_cast<unsigned long long>(stats.resumed_transfers.load()),
              static_cast<unsigned long long>(stats.resumed_bytes_kept.load()));
  ASSERT_TRUE(mid);
  ASSERT_TRUE(restarted) << nginx.log();
  ASSERT_TRUE(result.ok()) << result.to_string();
  EXPECT_LT(before_restart, file.size());  // the kill did interrupt the download
  EXPECT_TRUE(image_equals(*image, file));
  EXPECT_EQ(stats.chunks_fetched, 12u);
  EXPECT_GE(stats.resumed_transfers, 1u);
  EXPECT_GT(stats.resumed_bytes_kept, 0u);
  EXPECT_EQ(stats.bytes_received, file.size());  // no byte fetched twice
  EXPECT_EQ(stats.corrupt_chunks, 0u);
}

TEST(RemoteFetch, AChunkThatStaysCorruptFailsTheFetchAfterMaxAttempts) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes(8 * kChunk, 4);
  std::string served = file;
  served[2 * kChunk + 12345] ^= 0x01;
  put_file(nginx, "model.gguf", served);
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteOptions opt;
  opt.connections = 4;
  opt.max_attempts = 3;
  RemoteStats stats;
  VerifiedLog log(file);
  const Status s = fetch_remote(nginx.url("model.gguf"), image, pool, opt, log.callback(), &stats);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_NE(s.message().find("chunk 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("sha256"), std::string::npos) << s.message();
  EXPECT_EQ(stats.corrupt_chunks, 3u);
  EXPECT_FALSE(image->status().ok());
  EXPECT_FALSE(image->is_ready(2));
  EXPECT_EQ(log.calls[2], 0);  // corrupt bytes never reach a tier
  // Every chunk that did become ready is the file's; waiters see the failure.
  std::size_t ready = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    if (!image->is_ready(i)) continue;
    ++ready;
    EXPECT_TRUE(chunk_equals(*image, file, i)) << "chunk " << i;
  }
  EXPECT_GE(ready, 1u);
  EXPECT_EQ(stats.chunks_fetched, ready);
  EXPECT_EQ(log.wrong, 0);
  EXPECT_FALSE(image->wait(2 * kChunk, 1).ok());
}

TEST(RemoteFetch, ACorruptChunkIsFetchedAgainAndLoadsOnceTheServerHasTheRightBytes) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  // Slow enough (each chunk ~1 s) that the file is fixed before the second attempt is complete.
  NginxServer nginx({.limit_rate = "256k", .extra = ""});
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes(4 * kChunk, 5);
  std::string served = file;
  served[1 * kChunk + 7] ^= 0x80;
  put_file(nginx, "model.gguf", served);
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteOptions opt;
  opt.connections = 4;
  RemoteStats stats;
  VerifiedLog log(file);
  Status result{ErrorCode::kInternal, "not run"};
  std::thread fetcher(
      [&] { result = fetch_remote(nginx.url("model.gguf"), image, pool, opt, log.callback(), &stats); });
  const bool caught = poll_until([&] { return stats.corrupt_chunks >= 1; }, std::chrono::seconds(10));
  put_file(nginx, "model.gguf", file);
  fetcher.join();
  ASSERT_TRUE(caught);
  ASSERT_TRUE(result.ok()) << result.to_string();
  EXPECT_TRUE(image_equals(*image, file));
  EXPECT_GE(stats.corrupt_chunks, 1u);
  EXPECT_LT(stats.corrupt_chunks, 6u);
  EXPECT_EQ(stats.chunks_fetched, 4u);
  EXPECT_EQ(log.calls[1], 1);
  EXPECT_EQ(log.wrong, 0);
}

TEST(RemoteFetch, A404FailsAtOnceNamingTheUrlAndCode) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes(2 * kChunk, 6);
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteStats stats;
  const auto t0 = Clock::now();
  const Status s = fetch_remote(nginx.url("missing.gguf"), image, pool, RemoteOptions{}, nullptr, &stats);
  const double took = seconds_since(t0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_NE(s.message().find("404"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("missing.gguf"), std::string::npos) << s.message();
  EXPECT_LT(took, 1.0);  // no retries: 50 ms backoffs would add up past a few attempts
  EXPECT_EQ(stats.bytes_received, 0u);  // nginx's error page never lands in the image
  EXPECT_FALSE(image->status().ok());
  EXPECT_EQ(image->wait_complete().code(), ErrorCode::kIo);
}

TEST(RemoteFetch, AServerThatIsDownFailsAfterMaxAttempts) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;  // a free port, never started
  const std::string file = random_bytes(2 * kChunk, 7);
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteOptions opt;
  opt.max_attempts = 3;
  RemoteStats stats;
  const auto t0 = Clock::now();
  const Status s = fetch_remote(nginx.url("model.gguf"), image, pool, opt, nullptr, &stats);
  const double took = seconds_since(t0);
  std::printf("failed in %.3f s: %s\n", took, s.to_string().c_str());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_NE(s.message().find("3 attempts"), std::string::npos) << s.message();
  EXPECT_GE(took, 0.15);  // 50 + 100 ms of backoff between the three attempts
  EXPECT_LT(took, 5.0);
  EXPECT_FALSE(image->status().ok());
}

TEST(RemoteFetch, AServerFileOfAnotherSizeFailsAtOnce) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes(3 * kChunk, 12);
  put_file(nginx, "model.gguf", file + "appended");
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteStats stats;
  const Status s = fetch_remote(nginx.url("model.gguf"), image, pool, RemoteOptions{}, nullptr, &stats);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the manifest says " + std::to_string(file.size())), std::string::npos) << s.message();
  EXPECT_EQ(stats.bytes_received, 0u);
  EXPECT_FALSE(image->status().ok());
}

TEST(RemoteFetch, AServerThatIgnoresRangeIsUsedOnlyForAWholeFileRequest) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx({.extra = "    location /norange/ { max_ranges 0; }"});
  ASSERT_TRUE(nginx.start()) << nginx.log();
  std::filesystem::create_directories(nginx.root() + "/norange");
  const std::string big = random_bytes(3 * kChunk, 8), small = random_bytes(kChunk - 100, 9);
  put_file(nginx, "norange/big.gguf", big);
  put_file(nginx, "norange/small.gguf", small);
  VerifyPool pool(2);
  RemoteOptions opt;
  opt.max_attempts = 2;

  auto whole = image_for(small);  // one chunk: the range asked is the whole file, a 200 is that
  RemoteStats s1;
  const Status ok = fetch_remote(nginx.url("norange/small.gguf"), whole, pool, opt, nullptr, &s1);
  ASSERT_TRUE(ok.ok()) << ok.to_string();
  EXPECT_TRUE(image_equals(*whole, small));

  auto parts = image_for(big);
  RemoteStats s2;
  const Status bad = fetch_remote(nginx.url("norange/big.gguf"), parts, pool, opt, nullptr, &s2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("200"), std::string::npos) << bad.message();
  EXPECT_EQ(s2.bytes_received, 0u);  // the whole file never overwrote a chunk
  EXPECT_EQ(s2.chunks_fetched, 0u);
}

TEST(RemoteFetch, SendsTheBearerToken) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx(
      {.extra = "    location /private/ { if ($http_authorization != \"Bearer s3cret\") { return 403; } }"});
  ASSERT_TRUE(nginx.start()) << nginx.log();
  std::filesystem::create_directories(nginx.root() + "/private");
  const std::string file = random_bytes(2 * kChunk + 10, 10);
  put_file(nginx, "private/model.gguf", file);
  VerifyPool pool(2);

  auto refused = image_for(file);
  const Status no = fetch_remote(nginx.url("private/model.gguf"), refused, pool, RemoteOptions{}, nullptr, nullptr);
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.message().find("403"), std::string::npos) << no.message();

  auto image = image_for(file);
  RemoteOptions opt;
  opt.bearer_token = "s3cret";
  const Status yes = fetch_remote(nginx.url("private/model.gguf"), image, pool, opt, nullptr, nullptr);
  ASSERT_TRUE(yes.ok()) << yes.to_string();
  EXPECT_TRUE(image_equals(*image, file));
}

TEST(RemoteFetch, AFailingTierWriteFailsTheFetch) {
  if (test::skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  const std::string file = random_bytes(6 * kChunk, 11);
  put_file(nginx, "model.gguf", file);
  auto image = image_for(file);
  VerifyPool pool(2);
  RemoteStats stats;
  const ChunkCallback disk_full = [](std::size_t i, std::span<const std::uint8_t>) {
    return i == 3 ? Status{ErrorCode::kIo, "nvme: no space left"} : Status{};
  };
  const Status s = fetch_remote(nginx.url("model.gguf"), image, pool, RemoteOptions{}, disk_full, &stats);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no space left"), std::string::npos) << s.message();
  EXPECT_FALSE(image->is_ready(3));
  EXPECT_FALSE(image->status().ok());
}

}  // namespace
}  // namespace uma::store
