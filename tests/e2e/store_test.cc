// The model store on real files, a real nginx (the remote tier) and a real redis-server (the
// catalog): manifests, a flipped byte caught and fetched again, downloads that stream onto the
// NVMe tier, LRU under byte budgets, and llama.cpp fed from a filling image giving the logits of
// its own loader.
#include <gtest/gtest.h>
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cluster/model_catalog.h"
#include "e2e/daemon_harness.h"
#include "e2e/nginx_harness.h"
#include "e2e/redis_harness.h"
#include "e2e/tiny_runtime.h"
#include "store/direct_read.h"
#include "store/manifest.h"
#include "runtime/image_loader.h"
#include "store/tier_store.h"

namespace uma::test {
namespace {

namespace fs = std::filesystem;
using store::Tier;

const std::string kTiny = std::string(UMA_MODELS_DIR) + "/tiny-f16.gguf";
const std::string kOracle = std::string(UMA_MODELS_DIR) + "/oracle.gguf";
constexpr std::uint64_t kChunk = 256 << 10;  // many chunks even for the tiny model


std::shared_ptr<const store::Manifest> manifest_of(const std::string& path, const std::string& id) {
  auto m = std::make_shared<store::Manifest>();
  const Status s = store::build_manifest(path, id, kChunk, 2, m.get());
  EXPECT_TRUE(s.ok()) << s.to_string();
  return m;
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

bool image_equals_file(store::ModelImage& image, const std::string& path) {
  const std::string bytes = slurp(path);
  return bytes.size() == image.manifest().bytes && std::equal(bytes.begin(), bytes.end(), reinterpret_cast<const char*>(image.data()));
}

class Store : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test's name has a '/' ("Name/Stream"): one folder, so TearDown removes it all.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    dir_ = fs::temp_directory_path() / ("uma-store-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "nvme");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string nvme() const { return (dir_ / "nvme").string(); }
  store::TierConfig config() const {
    store::TierConfig c;
    c.nvme_dir = nvme();
    c.verify_threads = 2;
    c.direct.block = 64 << 10;
    c.remote.connections = 4;
    return c;
  }
  fs::path dir_;
};

TEST_F(Store, TheManifestIndexesEveryTensorAndRoundTrips) {
  auto m = manifest_of(kTiny, "tiny");
  EXPECT_EQ(m->bytes, fs::file_size(kTiny));
  EXPECT_EQ(m->chunk_count(), (m->bytes + kChunk - 1) / kChunk);
  ASSERT_NE(m->tensor("token_embd.weight"), nullptr);
  std::uint64_t tensor_bytes = 0;
  for (const auto& t : m->tensors) {
    EXPECT_GE(t.offset, m->data_offset);
    EXPECT_LE(t.offset + t.size, m->bytes);
    tensor_bytes += t.size;
  }
  EXPECT_GT(tensor_bytes, m->bytes / 2);
  store::Manifest back;
  ASSERT_TRUE(store::decode_manifest(store::encode_manifest(*m), &back).ok());
  EXPECT_EQ(back.chunks, m->chunks);
  EXPECT_EQ(back.tensors.size(), m->tensors.size());
  EXPECT_EQ(back.vocab_hash, m->vocab_hash);
  // Both test models carry the same tokenizer; a manifest claiming other chunks does not decode.
  EXPECT_EQ(manifest_of(kOracle, "oracle")->vocab_hash, m->vocab_hash);
  std::string text = store::encode_manifest(*m);
  text.insert(text.find(",", text.find("\"bytes\":")), "0");  // ten times the size: the chunk count is wrong
  EXPECT_FALSE(store::decode_manifest(text, &back).ok());
}

TEST_F(Store, AFlippedByteOnTheNvmeTierIsCaughtAndFetchedAgainFromTheRemoteTier) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  fs::copy_file(kTiny, fs::path(nginx.root()) / "tiny.gguf");
  auto m = manifest_of(kTiny, "tiny");
  const std::string local = nvme() + "/tiny.gguf";
  fs::copy_file(kTiny, local);
  const std::uint64_t at = m->tensor("blk.1.ffn_up.weight")->offset + 77;
  flip_byte(local, at);
  // The reader alone: exactly that chunk is left out, through io_uring and through pread (where a
  // container's seccomp profile refuses io_uring).
  for (const bool io_uring : {true, false}) {
    Status s;
    auto image = store::ModelImage::create(m, store::allocate_pageable, &s);
    store::VerifyPool pool(2);
    std::vector<std::size_t> corrupt;
    store::DirectReadOptions o{4, 64 << 10};
    o.io_uring = io_uring;
    store::DirectReadStats stats;
    ASSERT_TRUE(store::read_direct(local, image, pool, o, {}, &corrupt, &stats).ok());
    EXPECT_EQ(stats.io_uring, io_uring);
    EXPECT_EQ(stats.bytes_read, m->bytes);
    EXPECT_EQ(corrupt, std::vector<std::size_t>{m->first_chunk(at)});
    EXPECT_FALSE(image->is_ready(m->first_chunk(at)));
    EXPECT_EQ(image->ready_bytes(), m->bytes - m->chunk_size(m->first_chunk(at)));
  }
  store::TierStore ts(config());
  Status s;
  auto image = ts.acquire({m, nginx.url("tiny.gguf")}, &s);
  ASSERT_TRUE(image) << s.to_string();
  ASSERT_TRUE(image->wait_complete().ok()) << image->status().to_string();
  EXPECT_TRUE(image_equals_file(*image, kTiny));
  ts.drain();
  const auto h = ts.history();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].from, Tier::kNvme);
  EXPECT_EQ(h[0].corrupt_chunks, 1u);
  EXPECT_EQ(h[0].refetched_chunks, 1u);
  EXPECT_EQ(slurp(local), slurp(kTiny)) << "the NVMe copy is repaired in place";
  ts.release("tiny");
}

TEST_F(Store, WithoutARemoteTierACorruptChunkFailsTheLoadWithAClearError) {
  auto m = manifest_of(kTiny, "tiny");
  fs::copy_file(kTiny, nvme() + "/tiny.gguf");
  flip_byte(nvme() + "/tiny.gguf", m->bytes - 5);
  store::TierStore ts(config());
  Status s;
  auto image = ts.acquire({m, ""}, &s);
  ASSERT_TRUE(image);
  const Status w = image->wait_complete();
  EXPECT_EQ(w.code(), ErrorCode::kIo);
  EXPECT_NE(w.message().find("corrupt"), std::string::npos) << w.to_string();
  ts.release("tiny");
  // Fixed on disk, the next acquire tries again and succeeds.
  fs::copy_file(kTiny, nvme() + "/tiny.gguf", fs::copy_options::overwrite_existing);
  image = ts.acquire({m, ""}, &s);
  ASSERT_TRUE(image);
  EXPECT_TRUE(image->wait_complete().ok());
  ts.release("tiny");
}

TEST_F(Store, ARemoteFetchStreamsOntoTheNvmeTierAndAPartialDownloadResumesAfterARestart) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  fs::copy_file(kTiny, fs::path(nginx.root()) / "tiny.gguf");
  auto m = manifest_of(kTiny, "tiny");
  {
    store::TierStore ts(config());
    EXPECT_EQ(ts.tier("tiny"), Tier::kNone);
    Status s;
    auto image = ts.acquire({m, nginx.url("tiny.gguf")}, &s);
    ASSERT_TRUE(image && image->wait_complete().ok()) << (image ? image->status().to_string() : s.to_string());
    EXPECT_TRUE(image_equals_file(*image, kTiny));
    ts.drain();
    EXPECT_EQ(ts.history().at(0).from, Tier::kRemote);
    EXPECT_EQ(slurp(nvme() + "/tiny.gguf"), slurp(kTiny));
    EXPECT_FALSE(fs::exists(nvme() + "/tiny.gguf.part"));
    EXPECT_FALSE(fs::exists(nvme() + "/tiny.chunks"));
    EXPECT_EQ(ts.tier("tiny"), Tier::kDram) << "in use";
    ts.release("tiny");
    EXPECT_EQ(ts.tier("tiny"), Tier::kNvme) << "no DRAM budget: the image is not kept once released";
  }
  // A download a crashed agent left half done: the even chunks written, the map says so, one of
  // them damaged on disk since. The next fetch reads those from disk and only the rest remotely.
  fs::rename(nvme() + "/tiny.gguf", nvme() + "/tiny.gguf.part");
  std::string map(m->chunk_count(), '\0');
  for (std::size_t i = 0; i < map.size(); i += 2) map[i] = 1;
  std::ofstream(nvme() + "/tiny.chunks", std::ios::binary) << map;
  flip_byte(nvme() + "/tiny.gguf.part", m->chunk_offset(2) + 9);
  nginx.kill();  // the remote tier is down at first: resumed transfers must cope
  store::TierConfig c = config();
  // Retried every 2 s at most (the backoff's cap) for as long as the restart below may take.
  c.remote.max_attempts = 6 + static_cast<int>(kHangGuard / std::chrono::seconds(2));
  store::TierStore ts(c);
  Status s;
  auto image = ts.acquire({m, nginx.url("tiny.gguf")}, &s);
  ASSERT_TRUE(image);
  ASSERT_TRUE(image->wait(0, m->chunk_size(0)).ok());  // read from the part file, no network
  ASSERT_TRUE(nginx.start()) << nginx.log();
  ASSERT_TRUE(image->wait_complete().ok()) << image->status().to_string();
  EXPECT_TRUE(image_equals_file(*image, kTiny));
  ts.drain();
  const auto h = ts.history();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].corrupt_chunks, 1u);
  EXPECT_EQ(slurp(nvme() + "/tiny.gguf"), slurp(kTiny));
  ts.release("tiny");
}

TEST_F(Store, DramKeepsTheLeastRecentlyUsedImagesUnderItsBudgetAndNeverDropsOneInUse) {
  auto a = manifest_of(kTiny, "a"), b = manifest_of(kTiny, "b");
  fs::copy_file(kTiny, nvme() + "/a.gguf");
  fs::copy_file(kTiny, nvme() + "/b.gguf");
  store::TierConfig c = config();
  c.dram_bytes = a->bytes + (64 << 10);  // room for one image
  store::TierStore ts(c);
  Status s;
  auto ia = ts.acquire({a, ""}, &s);
  ASSERT_TRUE(ia && ia->wait_complete().ok());
  ts.release("a");
  EXPECT_EQ(ts.tier("a"), Tier::kDram);
  EXPECT_EQ(ts.acquire({a, ""}, &s), ia) << "a kept image is served again, no read";
  auto ib = ts.acquire({b, ""}, &s);  // a is still in use: both stay, over budget
  ASSERT_TRUE(ib && ib->wait_complete().ok());
  ts.drain();
  EXPECT_EQ(ts.tier("a"), Tier::kDram);
  EXPECT_EQ(ts.tier("b"), Tier::kDram);
  ts.release("b");  // b is now the least recently used unused image... a is in use
  EXPECT_EQ(ts.tier("a"), Tier::kDram);
  EXPECT_EQ(ts.tier("b"), Tier::kNvme);
  ts.release("a");
  EXPECT_EQ(ts.tier("a"), Tier::kDram);
  EXPECT_EQ(ts.history().size(), 2u) << "one fill per model";
}

TEST_F(Store, DramDropsTheLeastRecentlyUsedOfTwoUnusedImages) {
  auto a = manifest_of(kTiny, "a"), b = manifest_of(kTiny, "b");
  fs::copy_file(kTiny, nvme() + "/a.gguf");
  fs::copy_file(kTiny, nvme() + "/b.gguf");
  store::TierConfig c = config();
  c.dram_bytes = 2 * ((a->bytes + 4095) / 4096 * 4096);  // room for two images (whole pages), not three
  store::TierStore ts(c);
  Status s;
  for (const auto& m : {a, b}) {
    auto image = ts.acquire({m, ""}, &s);
    ASSERT_TRUE(image && image->wait_complete().ok());
    ts.release(m->id);
  }
  ASSERT_TRUE(ts.acquire({a, ""}, &s));  // a used again: b is now the least recently used
  ts.release("a");
  auto x = manifest_of(kTiny, "x");
  fs::copy_file(kTiny, nvme() + "/x.gguf");
  auto ix = ts.acquire({x, ""}, &s);
  ASSERT_TRUE(ix && ix->wait_complete().ok());
  ts.release("x");
  EXPECT_EQ(ts.tier("a"), Tier::kDram);
  EXPECT_EQ(ts.tier("b"), Tier::kNvme) << "the least recently used goes";
  EXPECT_EQ(ts.tier("x"), Tier::kDram);
}

// Both paths that copy out of the image wait for chunks the tier has not delivered yet: the image
// fills over a slow link (nginx at 2 MB/s) while the model loads from it.
class StoreFilling : public Store, public ::testing::WithParamInterface<ImageLoadPath> {};

TEST_P(StoreFilling, TheModelLoadsWhileTheImageIsStillFilling) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer::Options o;
  o.limit_rate = "2m";
  NginxServer nginx(o);
  ASSERT_TRUE(nginx.start()) << nginx.log();
  fs::copy_file(kTiny, fs::path(nginx.root()) / "tiny.gguf");
  auto m = manifest_of(kTiny, "tiny");
  store::TierConfig c = config();
  c.remote.connections = 1;
  store::TierStore ts(c);
  Status s;
  auto image = ts.acquire({m, nginx.url("tiny.gguf")}, &s);
  ASSERT_TRUE(image);
  ASSERT_FALSE(image->complete()) << "the link is slower than this";  // ~4 s for the tiny model at 2 MB/s
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  ImageLoadStats ls;
  llama_model* model = load_model_from_image(image, mp, &s, &ls, GetParam());
  ASSERT_NE(model, nullptr) << s.to_string();
  EXPECT_EQ(ls.path, static_cast<int>(GetParam()));
  EXPECT_GT(ls.wait_seconds, 0.0) << "it waited for chunks on their way";
  EXPECT_GE(ls.bytes_read, m->bytes - m->data_offset);
  if (GetParam() == ImageLoadPath::kCopy) {  // every tensor's bytes asked for once, the phase timed
    EXPECT_GT(ls.tensor_bytes, 0u);
    EXPECT_LE(ls.tensor_bytes, m->bytes - m->data_offset);
    EXPECT_GT(ls.tensor_seconds, 0.0);
    EXPECT_LE(ls.tensor_seconds, ls.seconds);
  } else {
    EXPECT_EQ(ls.tensor_bytes, 0u);
  }
  llama_model_free(model);
  ts.release("tiny");
}
INSTANTIATE_TEST_SUITE_P(Paths, StoreFilling, ::testing::Values(ImageLoadPath::kStream, ImageLoadPath::kCopy),
                         [](const auto& info) { return info.param == ImageLoadPath::kStream ? "Stream" : "Copy"; });

TEST_F(Store, TheNvmeTierDropsItsLeastRecentlyUsedFilesUnderItsBudget) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  fs::copy_file(kTiny, fs::path(nginx.root()) / "tiny.gguf");
  const std::uint64_t size = fs::file_size(kTiny);
  store::TierConfig c = config();
  c.nvme_bytes = 2 * size + size / 2;  // two files fit
  store::TierStore ts(c);
  for (const char* id : {"m1", "m2", "m3"}) {
    ASSERT_TRUE(ts.prefetch({manifest_of(kTiny, id), nginx.url("tiny.gguf")}, Tier::kNvme).ok());
    ts.drain();
  }
  for (const auto& r : ts.history()) EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_FALSE(fs::exists(nvme() + "/m1.gguf"));
  EXPECT_TRUE(fs::exists(nvme() + "/m2.gguf"));
  EXPECT_TRUE(fs::exists(nvme() + "/m3.gguf"));
  EXPECT_EQ(ts.tier("m1"), Tier::kRemote);
  EXPECT_EQ(ts.tier("m3"), Tier::kNvme);
}

// llama.cpp reading an image still being filled (its FILE* waits for each chunk), copying each
// tensor straight out of it, or mapping the finished image's memfd in place, computes what its own
// loader computes from the file.
class StoreLoad : public Store, public ::testing::WithParamInterface<ImageLoadPath> {};

TEST_P(StoreLoad, AModelFromAnImageComputesWhatLlamaCppsOwnLoaderComputes) {
  auto m = manifest_of(kTiny, "tiny");
  fs::copy_file(kTiny, nvme() + "/tiny.gguf");
  store::TierStore ts(config());
  Status s;
  auto image = ts.acquire({m, ""}, &s);
  ASSERT_TRUE(image);
  auto streamed = open_tiny_runtime([&](RuntimeConfig& cfg) {
    cfg.image = image;
    cfg.image_load = GetParam();
  });
  auto plain = open_tiny_runtime([](RuntimeConfig&) {});
  ASSERT_TRUE(streamed && plain);
  const std::vector<Token> prompt = tiny_prompt(24, 3);
  std::vector<std::vector<float>> out;
  for (LlamaRuntime* rt : {streamed.get(), plain.get()}) {
    ASSERT_TRUE(rt->start_sequence(0, SamplingParams{}).ok());
    std::vector<BatchEntry> batch;
    for (std::size_t i = 0; i < prompt.size(); ++i) batch.push_back({prompt[i], static_cast<std::int32_t>(i), 0, i + 1 == prompt.size()});
    ASSERT_TRUE(rt->decode(batch).ok());
    const auto row = rt->logits(static_cast<std::int32_t>(prompt.size() - 1));
    out.emplace_back(row.begin(), row.end());
    rt->end_sequence(0);
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  EXPECT_EQ(out[0], out[1]) << "same weights, same threads, same batch: the same floats";
  ts.release("tiny");
}
INSTANTIATE_TEST_SUITE_P(Paths, StoreLoad, ::testing::Values(ImageLoadPath::kStream, ImageLoadPath::kMap, ImageLoadPath::kCopy),
                         [](const auto& info) {
                           return info.param == ImageLoadPath::kStream ? "Stream" : info.param == ImageLoadPath::kMap ? "Map" : "Copy";
                         });

TEST(Catalog, AddListGetAndRemoveOnARealRedis) {
  RedisServer redis;
  ASSERT_TRUE(redis.start());
  cluster::RedisClient rc(redis.cluster_address(), kHangGuard);
  auto m = manifest_of(kTiny, "tiny");
  ASSERT_TRUE(cluster::catalog_put(rc, *m, "http://example.invalid/tiny.gguf").ok());
  ASSERT_TRUE(cluster::catalog_put(rc, *manifest_of(kOracle, "oracle"), "").ok());
  std::vector<cluster::CatalogModel> all;
  ASSERT_TRUE(cluster::catalog_list(rc, &all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "oracle");
  EXPECT_EQ(all[1].url, "http://example.invalid/tiny.gguf");
  cluster::CatalogModel got;
  std::shared_ptr<const store::Manifest> gm;
  ASSERT_TRUE(cluster::catalog_get(rc, "tiny", &got, &gm).ok());
  EXPECT_EQ(gm->chunks, m->chunks);
  EXPECT_EQ(got.bytes, m->bytes);
  EXPECT_EQ(cluster::catalog_get(rc, "nope", &got).code(), ErrorCode::kNotFound);
  ASSERT_TRUE(cluster::catalog_remove(rc, "tiny").ok());
  EXPECT_EQ(cluster::catalog_remove(rc, "tiny").code(), ErrorCode::kNotFound);
  ASSERT_TRUE(cluster::catalog_list(rc, &all).ok());
  EXPECT_EQ(all.size(), 1u);
}

}  // namespace
}  // namespace uma::test
