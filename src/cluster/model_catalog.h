// The cluster's model catalog in Redis: which models exist, how big, where their bytes can be
// fetched from, and their manifests. Durable (no TTL, unlike agents' soft state): written by
// `uma-store add|rm`, read by gateways (what /v1/models lists, what a request may name) and
// agents (a model's manifest and URL when they load it).
//
//   SADD uma:models {id}
//   SET  uma:model:{id}     {"id","bytes","url","vocab_hash","chunk_bytes","added_ms"}   (small: listing)
//   SET  uma:manifest:{id}  the manifest (store/manifest.h's JSON)
//   SET  uma:vocab:{hash}   the model's metadata as a tensorless GGUF (store::vocab_gguf), keyed by
//                           its vocab hash: what a gateway tokenizes and renders chat with. Shared
//                           by every model of that vocabulary, so `rm` leaves it
//
// Decoding type-checks every field (anyone on the network may write to Redis).
// Thread-safety: functions over a RedisClient, which has one owner thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cluster/redis_client.h"
#include "common/status.h"
#include "store/manifest.h"

namespace uma::cluster {

inline constexpr const char* kCatalogSet = "uma:models";

struct CatalogModel {
  std::string id;
  std::uint64_t bytes = 0;
  std::string url;  // the remote tier; empty: none (agents must hold it already)
  std::string vocab_hash;
  std::uint64_t chunk_bytes = 0;
  std::int64_t added_ms = 0;
};

// `vocab_gguf`: the model's store::vocab_gguf (empty: none written; gateways then cannot tokenize
// for it unless their own --model has its vocabulary).
Status catalog_put(RedisClient& redis, const store::Manifest& manifest, const std::string& url,
                   const std::string& vocab_gguf = "");
// kNotFound when the catalog does not have it.
Status catalog_get(RedisClient& redis, const std::string& id, CatalogModel* model,
                   std::shared_ptr<const store::Manifest>* manifest = nullptr);
// The vocabulary GGUF of `vocab_hash`; kNotFound when the catalog has none.
Status catalog_vocab(RedisClient& redis, const std::string& vocab_hash, std::string* gguf);
// The entries of `ids` (one MGET), in no particular order; ids gone or not decoding are skipped.
Status catalog_entries(RedisClient& redis, const std::vector<std::string>& ids, std::vector<CatalogModel>* models);
// Every model, sorted by id; entries that do not decode are skipped.
Status catalog_list(RedisClient& redis, std::vector<CatalogModel>* models);
// kNotFound when it was not there.
Status catalog_remove(RedisClient& redis, const std::string& id);

std::string encode_catalog_model(const CatalogModel& m);
Status decode_catalog_model(std::string_view json_text, CatalogModel* out);

}  // namespace uma::cluster
