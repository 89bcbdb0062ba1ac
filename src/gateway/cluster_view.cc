#include "gateway/cluster_view.h"

#include <algorithm>

#include "cluster/model_catalog.h"

namespace uma::gateway {

ClusterView::ClusterView(cluster::RedisAddress redis, std::chrono::milliseconds timeout, std::chrono::milliseconds max_age)
    : redis_(std::move(redis), timeout), max_age_(max_age) {}

namespace {

std::vector<std::string> sorted_members(const cluster::RedisReply& set) {
  std::vector<std::string> out;
  for (const cluster::RedisReply& e : set.elements) out.push_back(e.str);
  std::sort(out.begin(), out.end());  // a stable order for round-robin and ties
  return out;
}

}  // namespace

// Every live state of `ids` (their keys by `key`, one MGET): a key gone (its TTL ran out) or a
// beat older than max_age is not alive; one that does not decode is skipped and counted.
template <typename State>
Status ClusterView::read_states(const std::vector<std::string>& ids, std::string (*key)(const std::string&),
                                Status (*decode)(std::string_view, State*), std::int64_t now_ms, std::vector<State>* out) {
  if (ids.empty()) return {};
  std::vector<std::string> mget = {"MGET"};
  for (const std::string& id : ids) mget.push_back(key(id));
  cluster::RedisReply values;
  if (Status st = redis_.command(mget, &values); !st.ok()) return st;
  for (const cluster::RedisReply& v : values.elements) {
    if (v.kind != cluster::RedisReply::Kind::kString) continue;
    State state;
    if (!decode(v.str, &state).ok()) {
      ++undecodable_total_;
      continue;
    }
    if (now_ms - state.ts_ms <= max_age_.count()) out->push_back(std::move(state));
  }
  return {};
}

Status ClusterView::refresh(std::chrono::system_clock::time_point now) {
  std::vector<cluster::RedisReply> sets;
  Status st = redis_.pipeline({{"SMEMBERS", cluster::kAgentsSet}, {"SMEMBERS", cluster::kCatalogSet}, {"SMEMBERS", cluster::kLoadersSet}}, &sets);
  if (!st.ok() || sets.size() != 3) {
    stale_ = true;
    return st.ok() ? Status(ErrorCode::kIo, "redis: short pipeline reply") : st;
  }
  const std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::vector<cluster::AgentState> agents;
  std::vector<cluster::LoaderState> loaders;
  if (!(st = read_states(sorted_members(sets[0]), &cluster::agent_key, &cluster::decode_agent_state, now_ms, &agents)).ok() ||
      !(st = read_states(sorted_members(sets[2]), &cluster::loader_key, &cluster::decode_loader_state, now_ms, &loaders)).ok()) {
    stale_ = true;
    return st;
  }
  std::vector<std::string> catalog = sorted_members(sets[1]);
  std::vector<cluster::CatalogModel> entries;
  if (!(st = cluster::catalog_entries(redis_, catalog, &entries)).ok()) {
    stale_ = true;
    return st;
  }
  catalog_vocab_.clear();
  for (cluster::CatalogModel& m : entries) catalog_vocab_[m.id] = std::move(m.vocab_hash);
  agents_ = std::move(agents);
  catalog_ = std::move(catalog);
  loaders_ = std::move(loaders);
  stale_ = false;
  return Status::Ok();
}

}  // namespace uma::gateway
