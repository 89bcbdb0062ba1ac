// uma-store: the model store's command line (docs/STORE.md).
//   uma-store add FILE.gguf --id ID [--url URL] [--redis HOST:PORT]   write FILE.gguf.idx, register it
//   uma-store ls --redis HOST:PORT                                    the catalog
//   uma-store rm ID --redis HOST:PORT
//   uma-store verify FILE.gguf [--idx FILE.gguf.idx]                  every chunk against the manifest
//   uma-store fetch ID --redis HOST:PORT --dir DIR                    bring a model to an NVMe tier
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster/model_catalog.h"
#include "cluster/redis_flags.h"
#include "store/manifest.h"
#include "store/tier_store.h"

namespace {

using namespace uma;

int fail(const Status& s) {
  std::fprintf(stderr, "uma-store: %s\n", s.to_string().c_str());
  return s.code() == ErrorCode::kNotFound ? 2 : 1;
}

Status read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {ErrorCode::kIo, "cannot read " + path};
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return {};
}

cluster::RedisFlags g_redis;  // --redis-password-file, --redis-user (any subcommand; --redis is each one's)

Status connect(const std::string& text, std::unique_ptr<cluster::RedisClient>* out) {
  cluster::RedisAddress a;
  cluster::RedisFlags flags = g_redis;
  flags.address = text;
  if (Status s = flags.resolve(&a); !s.ok()) return s;
  *out = std::make_unique<cluster::RedisClient>(a, std::chrono::milliseconds(2000));
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-store: the model catalog and its checkpoint manifests"};
  app.require_subcommand(1);
  cluster::add_redis_credential_flags(app, g_redis);
  std::string redis = "127.0.0.1:6379", file, id, url, idx, dir;
  int chunk_mb = 8, threads = 0;

  CLI::App* add = app.add_subcommand("add", "write FILE.gguf.idx (the manifest) and register the model in the catalog");
  add->add_option("file", file, "the GGUF")->required()->check(CLI::ExistingFile);
  add->add_option("--id", id, "the catalog's name for it")->required();
  add->add_option("--url", url, "where agents fetch it (HTTP Range); empty: agents must hold it");
  add->add_option("--redis", redis, "the catalog's Redis (HOST:PORT); 'none': only write the manifest")->envname("UMA_REDIS");
  add->add_option("--chunk-mb", chunk_mb, "chunk size in MiB (transfer and verification unit)")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  add->add_option("--threads", threads, "hashing threads (0: all)")->capture_default_str();

  CLI::App* ls = app.add_subcommand("ls", "list the catalog");
  ls->add_option("--redis", redis, "the catalog's Redis")->envname("UMA_REDIS");
  CLI::App* rm = app.add_subcommand("rm", "remove a model from the catalog");
  rm->add_option("id", id)->required();
  rm->add_option("--redis", redis, "the catalog's Redis")->envname("UMA_REDIS");
  CLI::App* verify = app.add_subcommand("verify", "check a file against its manifest, chunk by chunk");
  verify->add_option("file", file)->required()->check(CLI::ExistingFile);
  verify->add_option("--idx", idx, "the manifest (default FILE.idx)");
  CLI::App* fetch = app.add_subcommand("fetch", "bring a catalog model into an NVMe tier directory");
  fetch->add_option("id", id)->required();
  fetch->add_option("--dir", dir, "the NVMe tier directory")->required();
  fetch->add_option("--redis", redis, "the catalog's Redis")->envname("UMA_REDIS");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<cluster::RedisClient> rc;
  if (*add) {
    if (!store::TierStore::valid_id(id)) return fail({ErrorCode::kInvalidArgument, "--id: [A-Za-z0-9._-], 1-128 characters"});
    store::Manifest m;
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = store::build_manifest(file, id, static_cast<std::uint64_t>(chunk_mb) << 20, threads, &m); !s.ok()) return fail(s);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ofstream(file + ".idx") << store::encode_manifest(m) << '\n';
    std::printf("%s: %llu bytes, %zu chunks, %zu tensors, vocab %s (hashed in %.2f s)\n", id.c_str(),
                static_cast<unsigned long long>(m.bytes), m.chunk_count(), m.tensors.size(), m.vocab_hash.substr(0, 16).c_str(), sec);
    if (redis == "none") return 0;
    if (Status s = connect(redis, &rc); !s.ok()) return fail(s);
    std::string vocab, vocab_hash;  // for gateways: tokenizer and chat template, without the weights
    if (Status s = store::vocab_gguf(file, &vocab, &vocab_hash); !s.ok()) return fail(s);
    if (Status s = cluster::catalog_put(*rc, m, url, vocab); !s.ok()) return fail(s);
    std::printf("registered %s in %s (vocabulary: %zu bytes)\n", id.c_str(), redis.c_str(), vocab.size());
    return 0;
  }
  if (*verify) {
    std::string text;
    if (Status s = read_file(idx.empty() ? file + ".idx" : idx, &text); !s.ok()) return fail(s);
    auto m = std::make_shared<store::Manifest>();
    if (Status s = store::decode_manifest(text, m.get()); !s.ok()) return fail(s);
    Status s;
    auto image = store::ModelImage::create(m, store::allocate_pageable, &s);
    if (!image) return fail(s);
    store::VerifyPool pool(threads);
    std::vector<std::size_t> corrupt;
    store::DirectReadStats ds;
    if (s = store::read_direct(file, image, pool, {}, {}, &corrupt, &ds); !s.ok()) return fail(s);
    for (std::size_t c : corrupt) std::printf("chunk %zu (bytes %llu..%llu): corrupt\n", c, static_cast<unsigned long long>(m->chunk_offset(c)),
                                              static_cast<unsigned long long>(m->chunk_offset(c) + m->chunk_size(c)));
    std::printf("%s: %zu of %zu chunks match\n", file.c_str(), m->chunk_count() - corrupt.size(), m->chunk_count());
    return corrupt.empty() ? 0 : 3;
  }
  if (Status s = connect(redis, &rc); !s.ok()) return fail(s);
  if (*ls) {
    std::vector<cluster::CatalogModel> models;
    if (Status s = cluster::catalog_list(*rc, &models); !s.ok()) return fail(s);
    for (const auto& m : models) {
      std::printf("%-32s %14llu  %s\n", m.id.c_str(), static_cast<unsigned long long>(m.bytes), m.url.empty() ? "-" : m.url.c_str());
    }
    return 0;
  }
  if (*rm) {
    if (Status s = cluster::catalog_remove(*rc, id); !s.ok()) return fail(s);
    return 0;
  }
  // fetch
  cluster::CatalogModel cm;
  std::shared_ptr<const store::Manifest> manifest;
  if (Status s = cluster::catalog_get(*rc, id, &cm, &manifest); !s.ok()) return fail(s);
  store::TierConfig tc;
  tc.nvme_dir = dir;
  store::TierStore ts(tc);
  if (Status s = ts.prefetch({manifest, cm.url}, store::Tier::kNvme); !s.ok()) return fail(s);
  ts.drain();
  for (const auto& r : ts.history()) {
    if (!r.status.ok()) return fail(r.status);
    std::printf("%s: %llu bytes from %s in %.2f s (%.0f MB/s), %llu corrupt chunks fetched again\n", r.id.c_str(),
                static_cast<unsigned long long>(r.bytes), std::string(store::tier_name(r.from)).c_str(), r.seconds,
                r.bytes / r.seconds / 1e6, static_cast<unsigned long long>(r.corrupt_chunks));
  }
  return 0;
}
