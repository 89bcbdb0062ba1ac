// ModelPulls: Ollama's POST /api/pull on the gateway. A catalog model is brought to a loader's
// local tier ahead of any load, from wherever its store finds it (the remote tier, usually):
// - a model some loader holds already (NVMe, DRAM, or loaded) or some agent serves is pulled;
// - else the loader it would be loaded on (cluster::choose_loader: the lowest predicted load
//   time) is asked to prefetch it (POST /prefetch to its NVMe tier; its DRAM where it has none),
//   and its GET /models is read every `poll` for the fill's bytes: Ollama's progress lines
//   ({"status":"pulling MODEL","total","completed"}) until the model is in that tier ("success"),
//   or the fill's error.
// `stream` false: one answer at the end ({"status":"success"}, or the error). The pull is the
// loader's: a client that leaves stops its progress, not the fill.
//
// Threading: the gateway's I/O thread. Ownership: the gateway owns it; the destructor aborts the
// pulls' calls (a loader's fill goes on).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/loader_state.h"
#include "httpkit/request_server.h"

namespace uma::gateway {

// Where a pull stands, read from a loader's GET /models answer (pure: unit-tested).
struct PullProgress {
  enum class Stage : std::uint8_t { kWaiting, kFilling, kDone, kFailed };
  Stage stage = Stage::kWaiting;
  std::uint64_t total = 0, completed = 0;
  std::string error;
};
PullProgress read_pull_progress(const nlohmann::json& models, const std::string& model);

// The loader a pull goes to: one holding `model` already (then *held), else choose_loader's
// (ties and a loader without room for a load: the one with the least queued); -1 when none.
int choose_pull_loader(const std::vector<cluster::LoaderState>& loaders, const std::string& model, bool* held);

struct ModelPullOptions {
  std::string api_key;  // the loaders' (Authorization: Bearer)
  std::chrono::milliseconds poll{250};
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
};

class ModelPulls {
 public:
  ModelPulls(boost::asio::io_context& io, ModelPullOptions options);
  ~ModelPulls();
  ModelPulls(const ModelPulls&) = delete;
  ModelPulls& operator=(const ModelPulls&) = delete;

  // `served`: some agent serves `model` already.
  void pull(const HttpExchangePtr& ex, const std::string& model, bool stream, bool served,
            const std::vector<cluster::LoaderState>& loaders);
  std::size_t running() const { return pulls_.size(); }

 private:
  struct Pull;
  struct Call;
  void prefetch(Pull& p, const std::string& tier);
  void prefetched(std::uint64_t id, unsigned status, const std::string& body);
  void poll(std::uint64_t id);
  void polled(std::uint64_t id, unsigned status, const std::string& body);
  void line(Pull& p, const nlohmann::json& j);
  void finish(std::uint64_t id, const std::string& error);
  void call(Pull& p, const char* method, const std::string& path, const std::string& body,
            void (ModelPulls::*then)(std::uint64_t, unsigned, const std::string&));

  boost::asio::io_context& io_;
  ModelPullOptions options_;
  std::map<std::uint64_t, std::unique_ptr<Pull>> pulls_;
  std::uint64_t next_id_ = 1;
};

}  // namespace uma::gateway
