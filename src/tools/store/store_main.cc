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

// The flags as given (each subcommand takes the ones it names).
struct StoreFlags {
  std::string redis = "127.0.0.1:6379", file, id, url, idx, dir;
  int chunk_mb = 8, threads = 0;
};

struct StoreCommands {
  CLI::App *add, *ls, *rm, *verify, *fetch;
};

StoreCommands add_store_commands(CLI::App& app, StoreFlags& f) {
  StoreCommands c{};
  c.add = app.add_subcommand("add", "write FILE.gguf.idx (the manifest) and register the model in the catalog");
  c.add->add_option("file", f.file, "the GGUF")->required()->check(CLI::ExistingFile);
  c.add->add_option("--id", f.id, "the catalog's name for it")->required();
  c.add->add_option("--url", f.url, "where agents fetch it (HTTP Range); empty: agents must hold it");
  c.add->add_option("--redis", f.redis, "the catalog's Redis (HOST:PORT); 'none': only write the manifest")->envname("UMA_REDIS");
  c.add->add_option("--chunk-mb", f.chunk_mb, "chunk size in MiB (transfer and verification unit)")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  c.add->add_option("--threads", f.threads, "hashing threads (0: all)")->capture_default_str();

  c.ls = app.add_subcommand("ls", "list the catalog");
  c.ls->add_option("--redis", f.redis, "the catalog's Redis")->envname("UMA_REDIS");
  c.rm = app.add_subcommand("rm", "remove a model from the catalog");
  c.rm->add_option("id", f.id)->required();
  c.rm->add_option("--redis", f.redis, "the catalog's Redis")->envname("UMA_REDIS");
  c.verify = app.add_subcommand("verify", "check a file against its manifest, chunk by chunk");
  c.verify->add_option("file", f.file)->required()->check(CLI::ExistingFile);
  c.verify->add_option("--idx", f.idx, "the manifest (default FILE.idx)");
  c.fetch = app.add_subcommand("fetch", "bring a catalog model into an NVMe tier directory");
  c.fetch->add_option("id", f.id)->required();
  c.fetch->add_option("--dir", f.dir, "the NVMe tier directory")->required();
  c.fetch->add_option("--redis", f.redis, "the catalog's Redis")->envname("UMA_REDIS");
  return c;
}

// add: the manifest written beside the file, then (unless --redis none) the catalog entry.
int store_add(const StoreFlags& f) {
  if (!store::TierStore::valid_id(f.id)) return fail({ErrorCode::kInvalidArgument, "--id: [A-Za-z0-9._-], 1-128 characters"});
  store::Manifest m;
  const auto t0 = std::chrono::steady_clock::now();
  if (Status s = store::build_manifest(f.file, f.id, static_cast<std::uint64_t>(f.chunk_mb) << 20, f.threads, &m); !s.ok()) return fail(s);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ofstream(f.file + ".idx") << store::encode_manifest(m) << '\n';
  std::printf("%s: %llu bytes, %zu chunks, %zu tensors, vocab %s (hashed in %.2f s)\n", f.id.c_str(),
              static_cast<unsigned long long>(m.bytes), m.chunk_count(), m.tensors.size(), m.vocab_hash.substr(0, 16).c_str(), sec);
  if (f.redis == "none") return 0;
  std::unique_ptr<cluster::RedisClient> rc;
  if (Status s = connect(f.redis, &rc); !s.ok()) return fail(s);
  std::string vocab, vocab_hash;  // for gateways: tokenizer and chat template, without the weights
  if (Status s = store::vocab_gguf(f.file, &vocab, &vocab_hash); !s.ok()) return fail(s);
  if (Status s = cluster::catalog_put(*rc, m, f.url, vocab); !s.ok()) return fail(s);
  std::printf("registered %s in %s (vocabulary: %zu bytes)\n", f.id.c_str(), f.redis.c_str(), vocab.size());
  return 0;
}

// verify: every chunk of the file read and hashed against the manifest; 3 when any differs.
int store_verify(const StoreFlags& f) {
  std::string text;
  if (Status s = read_file(f.idx.empty() ? f.file + ".idx" : f.idx, &text); !s.ok()) return fail(s);
  auto m = std::make_shared<store::Manifest>();
  if (Status s = store::decode_manifest(text, m.get()); !s.ok()) return fail(s);
  Status s;
  auto image = store::ModelImage::create(m, store::allocate_pageable, &s);
  if (!image) return fail(s);
  store::VerifyPool pool(f.threads);
  std::vector<std::size_t> corrupt;
  store::DirectReadStats ds;
  if (s = store::read_direct(f.file, image, pool, {}, {}, &corrupt, &ds); !s.ok()) return fail(s);
  for (std::size_t c : corrupt) std::printf("chunk %zu (bytes %llu..%llu): corrupt\n", c, static_cast<unsigned long long>(m->chunk_offset(c)),
                                            static_cast<unsigned long long>(m->chunk_offset(c) + m->chunk_size(c)));
  std::printf("%s: %zu of %zu chunks match\n", f.file.c_str(), m->chunk_count() - corrupt.size(), m->chunk_count());
  return corrupt.empty() ? 0 : 3;
}

int store_ls(cluster::RedisClient& rc) {
  std::vector<cluster::CatalogModel> models;
  if (Status s = cluster::catalog_list(rc, &models); !s.ok()) return fail(s);
  for (const auto& m : models) {
    std::printf("%-32s %14llu  %s\n", m.id.c_str(), static_cast<unsigned long long>(m.bytes), m.url.empty() ? "-" : m.url.c_str());
  }
  return 0;
}

// fetch: the catalog's model brought into --dir by a tier store of that one NVMe tier.
int store_fetch(cluster::RedisClient& rc, const StoreFlags& f) {
  cluster::CatalogModel cm;
  std::shared_ptr<const store::Manifest> manifest;
  if (Status s = cluster::catalog_get(rc, f.id, &cm, &manifest); !s.ok()) return fail(s);
  store::TierConfig tc;
  tc.nvme_dir = f.dir;
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-store: the model catalog and its checkpoint manifests"};
  app.require_subcommand(1);
  cluster::add_redis_credential_flags(app, g_redis);
  StoreFlags f;
  const StoreCommands cmd = add_store_commands(app, f);
  CLI11_PARSE(app, argc, argv);

  if (*cmd.add) return store_add(f);
  if (*cmd.verify) return store_verify(f);
  std::unique_ptr<cluster::RedisClient> rc;
  if (Status s = connect(f.redis, &rc); !s.ok()) return fail(s);
  if (*cmd.ls) return store_ls(*rc);
  if (*cmd.rm) {
    if (Status s = cluster::catalog_remove(*rc, f.id); !s.ok()) return fail(s);
    return 0;
  }
  return store_fetch(*rc, f);
}
