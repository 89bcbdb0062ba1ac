// uma-agent for the end-to-end tests: a real redis-server holding a catalog of oracle models
// (Catalog), real uma-agent processes each running a real umad per loaded model (Agent), and the
// management API's calls (load, models, a completion on a model's own port).
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "e2e/daemon_harness.h"
#include "e2e/redis_harness.h"

namespace uma::test {

// A server-side wait (a load queued for room, a request waiting for its model) as long as the hang guard.
inline const std::string kAgentGuardMs = std::to_string(std::chrono::milliseconds(kHangGuard).count());

class Agent {
 public:
  // `extra`: uma-agent's flags (the umads' come after them: one thread, two held streams' context).
  Agent(const std::string& redis, const std::string& store_dir, std::vector<std::string> extra);
  ~Agent();  // SIGKILL if still running
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  // SIGTERM (a drain, --drain-sec), then its exit: the exit code, -1 when a signal ended it, -2
  // when it still ran after the hang guard (then killed).
  int stop();
  int port() const { return port_; }
  std::string id() const { return "127.0.0.1:" + std::to_string(port_); }  // its cluster id
  std::string log() const;
  std::string run_dir() const { return run_dir_; }  // the umads' logs and sockets

 private:
  std::string log_path_, run_dir_;
  pid_t pid_ = -1;
  int port_ = -1;
};

std::string http_request(const std::string& method, const std::string& path, const std::string& body, const std::string& key);
std::string request(int port, const std::string& method, const std::string& path, const std::string& body, const std::string& key = "");
// A streamed /load: every event, the last one the end.
std::vector<nlohmann::json> load(int port, const std::string& model, const nlohmann::json& extra = nlohmann::json::object(),
                                 const std::string& key = "");
int port_of(const nlohmann::json& loaded);  // a loaded model's own HTTP port
nlohmann::json models(int port, const std::string& key = "");
nlohmann::json model_row(int port, const std::string& id);
std::string state_of(int port, const std::string& id);
bool model_in_use(int port, const std::string& id);
bool model_gone(int port, const std::string& id);
// A completion of `n` tokens for `model`: its text, or the whole response when it failed.
std::string complete_model(int port, const std::string& model, const std::string& prompt, int n, const std::string& key = "");

// Redis with a catalog of oracle models under the given ids, their files in `store_dir` (an
// agent's NVMe tier).
struct Catalog {
  RedisServer redis;
  std::string store_dir;
  std::uint64_t bytes = 0;
  bool up(const std::vector<std::string>& ids);
  // A store folder of its own holding every model (another agent's NVMe tier).
  std::string another_store(const std::vector<std::string>& ids) const;
  // An agent's --models-mb with room for one model, not two.
  std::string one_model_mb() const { return std::to_string((bytes >> 20) + 16); }
  static inline int counter = 0;
};

}  // namespace uma::test
