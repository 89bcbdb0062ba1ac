#include "gateway/model_pull.h"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/json_text.h"
#include "httpkit/http_wire.h"
#include "httpkit/upstream.h"

namespace uma::gateway {

namespace asio = boost::asio;
using ojson = nlohmann::ordered_json;

namespace {

bool held_state(const std::string& state) { return state == "nvme" || state == "dram" || state == "loaded"; }
bool held_state(cluster::ModelState s) {
  return s == cluster::ModelState::kNvme || s == cluster::ModelState::kDram || s == cluster::ModelState::kLoaded;
}

}  // namespace

PullProgress read_pull_progress(const nlohmann::json& models, const std::string& model) {
  PullProgress p;
  const auto list = models.find("models");
  if (list == models.end() || !list->is_array()) {
    p.stage = PullProgress::Stage::kFailed;
    p.error = "the loader's model list is unreadable";
    return p;
  }
  for (const nlohmann::json& row : *list) {
    if (!row.is_object() || row.value("model", "") != model) continue;
    p.total = row.value("bytes", std::uint64_t{0});
    p.completed = std::min(row.value("ready_bytes", std::uint64_t{0}), p.total);
    const std::string tier = row.value("tier", ""), state = row.value("state", "");
    if (held_state(tier) || state == "loaded") {
      p.stage = PullProgress::Stage::kDone;
      p.completed = p.total;
    } else if (row.value("filling", false)) {
      p.stage = PullProgress::Stage::kFilling;
    } else {
      // The fill ended, and the model is not there: it failed, or (a DRAM tier's) it went again.
      p.stage = PullProgress::Stage::kFailed;
      p.error = row.value("error", "the loader no longer holds it");
    }
    return p;
  }
  return p;  // not listed yet
}

int choose_pull_loader(const std::vector<cluster::LoaderState>& loaders, const std::string& model, bool* held) {
  *held = false;
  int loading = -1;
  for (std::size_t i = 0; i < loaders.size(); ++i) {
    const cluster::LoaderModel* m = loaders[i].model(model);
    if (m == nullptr) continue;
    if (held_state(m->state)) {
      *held = true;
      return static_cast<int>(i);
    }
    loading = static_cast<int>(i);  // on its way there: follow that fill
  }
  if (loading >= 0) return loading;
  // A pull fills a tier, not the budget: the prediction ranks the loaders; one without room for a
  // load can still take it (the least queued).
  if (const int i = cluster::choose_loader(loaders, model, 0); i >= 0) return i;
  const auto least = std::min_element(loaders.begin(), loaders.end(), [](const auto& a, const auto& b) {
    return a.queue_bytes < b.queue_bytes;
  });
  return least == loaders.end() ? -1 : static_cast<int>(least - loaders.begin());
}

// One request to the loader: its status and body (at most 1 MiB), then `done`.
struct ModelPulls::Call final : UpstreamSink {
  std::function<void(unsigned status, const std::string& body)> done;
  std::shared_ptr<Upstream> up;
  unsigned status = 0;
  std::string body;
  void on_head(unsigned s, bool) override { status = s; }
  void on_body(std::string_view bytes) override {
    if (body.size() < (1u << 20)) body.append(bytes.substr(0, (1u << 20) - body.size()));
  }
  void on_end() override { done(status, body); }
  void on_failed(const std::string& why, bool) override { done(0, "the loader could not be reached: " + why); }
};

struct ModelPulls::Pull {
  std::uint64_t id = 0;
  HttpExchangePtr ex;
  std::string model;
  bool stream = true;
  HostPort loader;
  std::string loader_id;
  std::string tier = "nvme";
  std::shared_ptr<Call> call;  // shared: freed after its own callback returns
  std::unique_ptr<asio::steady_timer> timer;
  std::chrono::steady_clock::time_point deadline;
  std::uint64_t shown = ~std::uint64_t{0};  // the `completed` last sent
  bool head_sent = false;
};

ModelPulls::ModelPulls(asio::io_context& io, ModelPullOptions options) : io_(io), options_(std::move(options)) {}

ModelPulls::~ModelPulls() {
  for (auto& [id, p] : pulls_) {
    if (p->call && p->call->up) p->call->up->abort();
  }
}

void ModelPulls::line(Pull& p, const nlohmann::json& j) {
  if (!p.stream || p.ex->gone()) return;
  if (!p.head_sent) {
    p.ex->send_raw(event_stream_head(p.ex->keep_alive(), p.ex->cors(), "application/x-ndjson"));
    p.head_sent = true;
  }
  p.ex->send_raw(http_chunk(to_json_text(j) + "\n"));
}

void ModelPulls::pull(const HttpExchangePtr& ex, const std::string& model, bool stream, bool served,
                      const std::vector<cluster::LoaderState>& loaders) {
  bool held = false;
  const int at = choose_pull_loader(loaders, model, &held);
  if (served || held) {
    spdlog::info("pull {}: {} already", model, served ? "served" : "held by " + loaders[at].id);
    if (!stream) return ex->reply_json(200, R"({"status":"success"})");
    ex->send_raw(event_stream_head(ex->keep_alive(), ex->cors(), "application/x-ndjson"));
    ex->send_raw(http_chunk("{\"status\":\"pulling manifest\"}\n{\"status\":\"success\"}\n"));
    ex->send_raw(kLastChunk);
    return ex->finish_raw();
  }
  HostPort hp;
  if (at < 0 || !parse_host_port(loaders[at].address, &hp)) {
    return ex->reply_json(503, to_json_text(ojson{{"error", "no loader to pull '" + model + "' to"}}));
  }
  auto p = std::make_unique<Pull>();
  p->id = next_id_++;
  p->ex = ex;
  p->model = model;
  p->stream = stream;
  p->loader = hp;
  p->loader_id = loaders[at].id;
  p->timer = std::make_unique<asio::steady_timer>(io_);
  p->deadline = std::chrono::steady_clock::now() + options_.timeout;
  Pull& ref = *p;
  pulls_[ref.id] = std::move(p);
  spdlog::info("pull {}: to {}", model, ref.loader_id);
  line(ref, {{"status", "pulling manifest"}});
  prefetch(ref, "nvme");
}

void ModelPulls::call(Pull& p, const char* method, const std::string& path, const std::string& body,
                      void (ModelPulls::*then)(std::uint64_t, unsigned, const std::string&)) {
  p.call = std::make_shared<Call>();
  p.call->done = [this, id = p.id, then, keep = std::weak_ptr<Call>(p.call)](unsigned status, const std::string& b) {
    // Not inside the call's own callback: the loop frees it once this handler returns.
    asio::post(io_, [call = keep.lock()] {});
    (this->*then)(id, status, b);
  };
  Upstream::Options uo;
  uo.max_body_bytes = 1u << 20;
  const std::string host = host_header(p.loader);
  p.call->up = Upstream::start(io_, p.loader,
                               http_request({.method = method, .target = path, .host = host, .body = body,
                                             .bearer = options_.api_key, .keep_alive = false}),
                               p.call.get(), uo);
}

void ModelPulls::prefetch(Pull& p, const std::string& tier) {
  p.tier = tier;
  call(p, "POST", "/prefetch", to_json_text(ojson{{"model", p.model}, {"tier", tier}}), &ModelPulls::prefetched);
}

void ModelPulls::prefetched(std::uint64_t id, unsigned status, const std::string& body) {
  const auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  Pull& p = *it->second;
  if (status / 100 == 2) return poll(id);
  if (status == 400 && p.tier == "nvme") return prefetch(p, "dram");  // a loader without an NVMe tier
  finish(id, status == 0 ? body : "loader " + p.loader_id + " refused the prefetch (" + std::to_string(status) + "): " + body);
}

void ModelPulls::poll(std::uint64_t id) {
  const auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  call(*it->second, "GET", "/models", "", &ModelPulls::polled);
}

void ModelPulls::polled(std::uint64_t id, unsigned status, const std::string& body) {
  const auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  Pull& p = *it->second;
  if (p.ex->gone()) return finish(id, "the client left");
  if (status != 200) return finish(id, status == 0 ? body : "loader " + p.loader_id + " answered " + std::to_string(status));
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  const PullProgress progress = read_pull_progress(j, p.model);
  using Stage = PullProgress::Stage;
  if (progress.stage == Stage::kFailed) return finish(id, progress.error);
  if ((progress.stage == Stage::kFilling || progress.stage == Stage::kDone) && progress.completed != p.shown) {
    line(p, {{"status", "pulling " + p.model}, {"total", progress.total}, {"completed", progress.completed}});
    p.shown = progress.completed;
  }
  if (progress.stage == Stage::kDone) return finish(id, "");
  if (std::chrono::steady_clock::now() > p.deadline) return finish(id, "the pull did not end in time");
  p.timer->expires_after(options_.poll);
  p.timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (!ec) poll(id);
  });
}

void ModelPulls::finish(std::uint64_t id, const std::string& error) {
  const auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  std::unique_ptr<Pull> p = std::move(it->second);
  pulls_.erase(it);
  p->timer->cancel();
  if (error.empty()) {
    spdlog::info("pull {}: in loader {}'s {} tier", p->model, p->loader_id, p->tier);
  } else {
    spdlog::warn("pull {} to {}: {}", p->model, p->loader_id, error);
  }
  if (p->ex->gone()) return;
  const ojson end = error.empty() ? ojson{{"status", "success"}} : ojson{{"error", error}};
  if (!p->stream) return p->ex->reply_json(error.empty() ? 200 : 500, to_json_text(end));
  if (error.empty()) {
    line(*p, {{"status", "verifying sha256 digest"}});  // the store verified every chunk as it came
    line(*p, {{"status", "writing manifest"}});
  }
  line(*p, end);
  p->ex->send_raw(kLastChunk);
  p->ex->finish_raw();
}

}  // namespace uma::gateway
