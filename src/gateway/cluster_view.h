// ClusterView: a gateway's snapshot of the cluster's agents, read from Redis (the `uma:agents` set,
// then every `uma:agent:{id}` key, in one pipelined round trip). Fail-static: when Redis cannot be
// read, the last snapshot stays and routing goes on with it; `stale()` says so. An agent whose key
// is gone (its TTL ran out) or whose beat is older than `max_age` is not in the snapshot; a key
// that does not decode is skipped and counted. The same round trip reads the model catalog
// (`uma:models` and each entry, cluster/model_catalog.h: what may be asked for, and each model's
// vocabulary) and the loaders (`uma:loaders`, cluster/loader_state.h: uma-agents that load models
// on demand), kept on the same terms as agents.
//
// Thread-safety: none; one owner (the gateway's refresher). Clock: the caller passes `now`.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cluster/agent_state.h"
#include "cluster/loader_state.h"
#include "cluster/redis_client.h"

namespace uma::gateway {

class ClusterView {
 public:
  ClusterView(cluster::RedisAddress redis, std::chrono::milliseconds timeout, std::chrono::milliseconds max_age);
  // One read of Redis. On an error the snapshot is kept (fail-static) and the error returned.
  Status refresh(std::chrono::system_clock::time_point now);
  const std::vector<cluster::AgentState>& agents() const { return agents_; }
  const std::vector<std::string>& catalog() const { return catalog_; }  // sorted
  // Each catalog model's vocab hash (a model whose entry does not decode is listed without one).
  const std::unordered_map<std::string, std::string>& catalog_vocab() const { return catalog_vocab_; }
  const std::vector<cluster::LoaderState>& loaders() const { return loaders_; }  // sorted by id
  bool stale() const { return stale_; }
  std::uint64_t undecodable_total() const { return undecodable_total_; }

 private:
  template <typename State>
  Status read_states(const std::vector<std::string>& ids, std::string (*key)(const std::string&),
                     Status (*decode)(std::string_view, State*), std::int64_t now_ms, std::vector<State>* out);
  cluster::RedisClient redis_;
  std::chrono::milliseconds max_age_;
  std::vector<cluster::AgentState> agents_;
  std::vector<std::string> catalog_;
  std::unordered_map<std::string, std::string> catalog_vocab_;
  std::vector<cluster::LoaderState> loaders_;
  bool stale_ = true;  // nothing read yet
  std::uint64_t undecodable_total_ = 0;
};

}  // namespace uma::gateway
