#include "cluster/model_catalog.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

namespace uma::cluster {
namespace {

using json = nlohmann::json;
const std::string kModels = kCatalogSet;
std::string model_key(const std::string& id) { return "uma:model:" + id; }
std::string manifest_key(const std::string& id) { return "uma:manifest:" + id; }
std::string vocab_key(const std::string& hash) { return "uma:vocab:" + hash; }

}  // namespace

std::string encode_catalog_model(const CatalogModel& m) {
  return json{{"id", m.id}, {"bytes", m.bytes}, {"url", m.url}, {"vocab_hash", m.vocab_hash},
              {"chunk_bytes", m.chunk_bytes}, {"added_ms", m.added_ms}}
      .dump();
}

Status decode_catalog_model(std::string_view text, CatalogModel* out) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {ErrorCode::kInvalidJson, "catalog entry: not a JSON object"};
  const auto bad = [](const char* f) { return Status(ErrorCode::kBadRequest, std::string("catalog entry: bad field '") + f + "'", f); };
  CatalogModel m;
  const auto str = [&](const char* f, std::string* v) {
    auto it = j.find(f);
    if (it == j.end() || !it->is_string()) return false;
    *v = it->get<std::string>();
    return true;
  };
  const auto u64 = [&](const char* f, std::uint64_t* v) {
    auto it = j.find(f);
    if (it == j.end() || !it->is_number_unsigned()) return false;
    *v = it->get<std::uint64_t>();
    return true;
  };
  if (!str("id", &m.id) || m.id.empty()) return bad("id");
  if (!u64("bytes", &m.bytes)) return bad("bytes");
  if (!str("url", &m.url)) return bad("url");
  if (!str("vocab_hash", &m.vocab_hash)) return bad("vocab_hash");
  if (!u64("chunk_bytes", &m.chunk_bytes)) return bad("chunk_bytes");
  auto added = j.find("added_ms");
  if (added == j.end() || !added->is_number_integer()) return bad("added_ms");
  m.added_ms = added->get<std::int64_t>();
  *out = std::move(m);
  return {};
}

Status catalog_put(RedisClient& redis, const store::Manifest& manifest, const std::string& url,
                   const std::string& vocab_gguf) {
  CatalogModel m;
  m.id = manifest.id;
  m.bytes = manifest.bytes;
  m.url = url;
  m.vocab_hash = manifest.vocab_hash;
  m.chunk_bytes = manifest.chunk_bytes;
  m.added_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  // MULTI/EXEC: a reader never sees the entry without its manifest (or its vocabulary).
  std::vector<std::vector<std::string>> cmds = {{"MULTI"}, {"SET", manifest_key(m.id), store::encode_manifest(manifest)}};
  if (!vocab_gguf.empty()) cmds.push_back({"SET", vocab_key(m.vocab_hash), vocab_gguf});
  cmds.push_back({"SET", model_key(m.id), encode_catalog_model(m)});
  cmds.push_back({"SADD", kModels, m.id});
  cmds.push_back({"EXEC"});
  return redis.pipeline(cmds);
}

Status catalog_vocab(RedisClient& redis, const std::string& vocab_hash, std::string* gguf) {
  RedisReply r;
  if (Status s = redis.command({"GET", vocab_key(vocab_hash)}, &r); !s.ok()) return s;
  if (r.kind != RedisReply::Kind::kString) return {ErrorCode::kNotFound, "the catalog has no vocabulary " + vocab_hash.substr(0, 16)};
  *gguf = std::move(r.str);
  return {};
}

Status catalog_get(RedisClient& redis, const std::string& id, CatalogModel* model,
                   std::shared_ptr<const store::Manifest>* manifest) {
  std::vector<RedisReply> r;
  if (Status s = redis.pipeline({{"GET", model_key(id)}, {"GET", manifest_key(id)}}, &r); !s.ok()) return s;
  if (r.size() != 2 || r[0].kind != RedisReply::Kind::kString) return {ErrorCode::kNotFound, "model '" + id + "' is not in the catalog"};
  if (Status s = decode_catalog_model(r[0].str, model); !s.ok()) return s;
  if (manifest) {
    if (r[1].kind != RedisReply::Kind::kString) return {ErrorCode::kNotFound, "model '" + id + "' has no manifest in the catalog"};
    auto m = std::make_shared<store::Manifest>();
    if (Status s = store::decode_manifest(r[1].str, m.get()); !s.ok()) return s;
    if (m->id != id || m->bytes != model->bytes) return {ErrorCode::kBadRequest, "model '" + id + "': its manifest and entry disagree"};
    *manifest = std::move(m);
  }
  return {};
}

Status catalog_entries(RedisClient& redis, const std::vector<std::string>& ids, std::vector<CatalogModel>* models) {
  models->clear();
  if (ids.empty()) return {};
  std::vector<std::string> mget{"MGET"};
  for (const std::string& id : ids) mget.push_back(model_key(id));
  RedisReply vals;
  if (Status s = redis.command(mget, &vals); !s.ok()) return s;
  for (const RedisReply& v : vals.elements) {
    CatalogModel m;
    if (v.kind == RedisReply::Kind::kString && decode_catalog_model(v.str, &m).ok()) models->push_back(std::move(m));
  }
  return {};
}

Status catalog_list(RedisClient& redis, std::vector<CatalogModel>* models) {
  models->clear();
  RedisReply ids;
  if (Status s = redis.command({"SMEMBERS", kModels}, &ids); !s.ok()) return s;
  std::vector<std::string> names;
  for (const RedisReply& e : ids.elements) names.push_back(e.str);
  if (Status s = catalog_entries(redis, names, models); !s.ok()) return s;
  std::sort(models->begin(), models->end(), [](const CatalogModel& a, const CatalogModel& b) { return a.id < b.id; });
  return {};
}

Status catalog_remove(RedisClient& redis, const std::string& id) {
  std::vector<RedisReply> r;
  if (Status s = redis.pipeline({{"DEL", model_key(id), manifest_key(id)}, {"SREM", kModels, id}}, &r); !s.ok()) return s;
  if (r.size() == 2 && r[0].integer == 0 && r[1].integer == 0) return {ErrorCode::kNotFound, "model '" + id + "' is not in the catalog"};
  return {};
}

}  // namespace uma::cluster
