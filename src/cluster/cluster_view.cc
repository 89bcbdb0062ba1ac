#include "cluster/cluster_view.h"

#include <algorithm>

#include "cluster/agent_heartbeat.h"
#include "cluster/model_catalog.h"

namespace uma::cluster {

ClusterView::ClusterView(RedisAddress redis, std::chrono::milliseconds timeout, std::chrono::milliseconds max_age)
    : redis_(std::move(redis), timeout), max_age_(max_age) {}

Status ClusterView::refresh(std::chrono::system_clock::time_point now) {
  std::vector<RedisReply> sets;
  Status st = redis_.pipeline({{"SMEMBERS", kAgentsSet}, {"SMEMBERS", kCatalogSet}, {"SMEMBERS", kLoadersSet}}, &sets);
  if (!st.ok() || sets.size() != 3) {
    stale_ = true;
    return st.ok() ? Status(ErrorCode::kIo, "redis: short pipeline reply") : st;
  }
  const RedisReply& ids = sets[0];
  std::vector<std::string> catalog;
  for (const RedisReply& e : sets[1].elements) catalog.push_back(e.str);
  std::sort(catalog.begin(), catalog.end());
  std::vector<std::string> members;
  for (const RedisReply& e : ids.elements) members.push_back(e.str);
  std::sort(members.begin(), members.end());  // a stable order for round-robin and ties
  std::vector<std::string> loader_ids;
  for (const RedisReply& e : sets[2].elements) loader_ids.push_back(e.str);
  std::sort(loader_ids.begin(), loader_ids.end());
  const std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::vector<LoaderState> loaders;
  if (!loader_ids.empty()) {
    std::vector<std::string> mget = {"MGET"};
    for (const std::string& id : loader_ids) mget.push_back(loader_key(id));
    RedisReply values;
    if (st = redis_.command(mget, &values); !st.ok()) {
      stale_ = true;
      return st;
    }
    for (const RedisReply& v : values.elements) {
      LoaderState l;
      if (v.kind != RedisReply::Kind::kString) continue;
      if (!decode_loader_state(v.str, &l).ok()) {
        ++undecodable_total_;
        continue;
      }
      if (now_ms - l.ts_ms <= max_age_.count()) loaders.push_back(std::move(l));
    }
  }
  std::vector<AgentState> fresh;
  if (!members.empty()) {
    std::vector<std::string> mget = {"MGET"};
    for (const std::string& id : members) mget.push_back(agent_key(id));
    RedisReply values;
    if (st = redis_.command(mget, &values); !st.ok()) {
      stale_ = true;
      return st;
    }
    for (const RedisReply& v : values.elements) {
      if (v.kind != RedisReply::Kind::kString) continue;  // its key expired: a dead agent
      AgentState a;
      if (!decode_agent_state(v.str, &a).ok()) {
        ++undecodable_total_;
        continue;
      }
      if (now_ms - a.ts_ms > max_age_.count()) continue;  // a beat too old: not alive
      fresh.push_back(std::move(a));
    }
  }
  agents_ = std::move(fresh);
  catalog_ = std::move(catalog);
  loaders_ = std::move(loaders);
  stale_ = false;
  return Status::Ok();
}

}  // namespace uma::cluster
