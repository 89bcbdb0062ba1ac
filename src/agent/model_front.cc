#include "agent/model_front.h"

#include "webui/webui.h"

#include <boost/asio/post.hpp>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/agent_api.h"
#include "common/json_text.h"
#include "http/ollama_api.h"
#include "http/openai.h"
#include "httpkit/http_wire.h"
#include "httpkit/upstream.h"

namespace uma::agent {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using ojson = nlohmann::ordered_json;

// One request on its way to a model's umad and its answer on the way back.
class ModelFront::Relay final : public UpstreamSink {
 public:
  Relay(ModelFront& front, std::uint64_t id, HttpExchangePtr ex, std::string model, std::string body,
        std::optional<std::int64_t> keep_alive, int attempt)
      : front_(front), id_(id), ex_(std::move(ex)), model_(std::move(model)), body_(std::move(body)),
        keep_alive_(keep_alive), attempt_(attempt) {}
  ~Relay() override {
    if (upstream_) upstream_->abort();
  }

  void start(const HostPort& to) {
    const HttpRequest& r = ex_->request();
    const std::string target = r.path + (r.query.empty() ? "" : "?" + r.query);
    std::string req = http_request({.method = http::to_string(r.method), .target = target, .host = host_header(to),
                                    .body = body_, .bearer = front_.upstream_key_});
    upstream_ = Upstream::start(front_.io_, to, std::move(req), this, Upstream::Options{}, &front_.pool_);
  }
  bool client_gone() const { return ex_->gone(); }
  void cut() {  // its client went away: closing the connection cancels the request in the umad
    front_.counters_.client_gone++;
    finish();
  }

  void on_head(unsigned status, bool streamed) override {
    status_ = status;
    streaming_ = streamed && status == 200;
    if (streaming_) ex_->start_events(upstream_ ? upstream_->content_type() : std::string_view{});
  }
  void on_body(std::string_view bytes) override {
    if (ex_->gone()) return cut();
    if (streaming_) return ex_->event_bytes(bytes);
    answer_.append(bytes);
  }
  void on_end() override {
    if (streaming_) {
      ex_->end_events();
    } else {
      ex_->reply(status_, "application/json", answer_);
    }
    front_.counters_.relayed++;
    finish();
  }
  void on_failed(const std::string& why, bool before_head) override {
    if (before_head && attempt_ == 1 && !ex_->gone()) {
      // Unloaded between its load and this request (keep_alive, or room for another): load it again.
      spdlog::info("model {}: its umad went before the request reached it ({}): loading it again", model_, why);
      front_.counters_.reloaded++;
      front_.relay(ex_, model_, std::move(body_), keep_alive_, attempt_ + 1);
      return finish();
    }
    front_.counters_.failed++;
    const Status st(ErrorCode::kUnavailable, "model '" + model_ + "': its server went away: " + why);
    if (streaming_) {
      ex_->event(http_error_body(st));
      ex_->end_events();
    } else {
      ex_->reply_error(st);
    }
    finish();
  }

 private:
  void finish() {
    if (upstream_) std::exchange(upstream_, nullptr)->abort();
    front_.relay_done(id_);
  }

  ModelFront& front_;
  const std::uint64_t id_;
  HttpExchangePtr ex_;
  std::string model_;
  std::string body_;
  std::optional<std::int64_t> keep_alive_;
  const int attempt_;
  std::shared_ptr<Upstream> upstream_;
  unsigned status_ = 0;
  bool streaming_ = false;
  std::string answer_;
};

ModelFront::ModelFront(asio::io_context& io, ModelHost& host, std::vector<FrontModel> models, std::string upstream_key,
                       bool webui)
    : io_(io), host_(host), models_(std::move(models)), upstream_key_(std::move(upstream_key)), webui_(webui), sweep_timer_(io) {
  std::sort(models_.begin(), models_.end(), [](const FrontModel& a, const FrontModel& b) { return a.id < b.id; });
}

ModelFront::~ModelFront() {
  *alive_ = false;
  stop();
}

void ModelFront::start() { sweep(); }

void ModelFront::stop() {
  stopped_ = true;
  sweep_timer_.cancel();
  relays_.clear();
}

void ModelFront::sweep() {
  std::vector<Relay*> gone;
  for (auto& [id, r] : relays_) {
    if (r->client_gone()) gone.push_back(r.get());
  }
  for (Relay* r : gone) r->cut();
  sweep_timer_.expires_after(std::chrono::seconds(1));
  sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) sweep();
  });
}

void ModelFront::relay_done(std::uint64_t id) {
  // Never freed inside its own callback: the loop frees it once the current handler returns.
  auto it = relays_.find(id);
  if (it == relays_.end()) return;
  asio::post(io_, [r = std::shared_ptr<Relay>(std::move(it->second))] {});
  relays_.erase(it);
}

void ModelFront::handle(const HttpExchangePtr& ex) {
  const HttpRequest& r = ex->request();
  if (r.method == http::verb::get) {
    if (const auto page = webui_ ? webui::asset(r.path) : std::nullopt) return ex->reply(200, page->content_type, page->body);
    if (r.path == "/health") {
      return ex->reply_json(200, "{\"status\":\"ok\",\"models\":" + std::to_string(models_.size()) +
                                     ",\"loaded\":" + std::to_string(host_.models().size()) + "}");
    }
    if (r.path == "/v1/models" || r.path == "/models") return list(ex);
    if (ollama_get(ex)) return;
    if (r.path == "/metrics") {
      std::string out = host_metrics_text(host_);
      const auto counter = [&out](const char* name, const char* help, std::uint64_t v) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " + std::to_string(v) + "\n";
      };
      counter("uma_router_relayed_total", "requests relayed to a model's umad", counters_.relayed);
      counter("uma_router_reloaded_total", "requests whose model went before they reached it, loaded again", counters_.reloaded);
      counter("uma_router_failed_total", "requests the router answered with an error", counters_.failed);
      counter("uma_router_client_gone_total", "relays cut short by their client leaving", counters_.client_gone);
      return ex->reply(200, "text/plain; version=0.0.4", out);
    }
    return ex->reply_error(Status(ErrorCode::kNotFound, "no such endpoint: GET " + r.path));
  }
  if (r.method != http::verb::post) {
    return ex->reply_error(Status(ErrorCode::kBadRequest, "no such endpoint: " + std::string(http::to_string(r.method)) + " " + r.path));
  }
  if (r.path == "/api/pull") {  // the models' files are here: pulled already, without loading them
    const http_route::Reply pulled = http_route::ollama_pull_local(r.body, [this](const std::string& id) {
      return std::any_of(models_.begin(), models_.end(), [&](const FrontModel& f) { return f.id == id || f.id + ".gguf" == id; });
    });
    return ex->reply(pulled.status, pulled.content_type, pulled.body);
  }
  nlohmann::json body = nlohmann::json::parse(r.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return ex->reply_error(Status(ErrorCode::kInvalidJson, "the body must be a JSON object"));
  const auto m = body.find("model");
  if (m == body.end() || !m->is_string()) {
    return ex->reply_error(Status(ErrorCode::kBadRequest, "'model' is required: this server serves several models (GET /v1/models)", "model"));
  }
  std::string model = m->get<std::string>();
  // A model is named by its file's name, with or without ".gguf".
  const auto known = [this](const std::string& id) {
    return std::any_of(models_.begin(), models_.end(), [&](const FrontModel& f) { return f.id == id; });
  };
  if (!known(model) && model.size() > 5 && model.ends_with(".gguf") && known(model.substr(0, model.size() - 5))) {
    model.resize(model.size() - 5);
  }
  if (!known(model)) return ex->reply_error(Status(ErrorCode::kNotFound, "The model '" + model + "' does not exist", "model"));
  std::optional<std::int64_t> keep_alive;
  if (Status st = read_keep_alive(body, &keep_alive); !st.ok()) return ex->reply_error(st);
  if (ollama_unload(ex, model, body, keep_alive)) return;
  std::string forwarded = r.body;
  if (body.contains("keep_alive")) {  // the router's field, not the model's
    body.erase("keep_alive");
    forwarded = body.dump();
  }
  relay(ex, std::move(model), std::move(forwarded), keep_alive, 1);
}

void ModelFront::relay(const HttpExchangePtr& ex, std::string model, std::string body, std::optional<std::int64_t> keep_alive,
                       int attempt) {
  const std::string id = model;
  host_.load(id, keep_alive, [this, alive = alive_, ex, model = std::move(model), body = std::move(body), keep_alive,
                              attempt](const LoadUpdate& u) mutable {
    if (!*alive || !u.done || stopped_) return;
    if (ex->gone()) {
      counters_.client_gone++;
      return;
    }
    HostPort to;
    Status st = u.status;
    if (st.ok() && !parse_host_port(u.http, &to)) st = Status(ErrorCode::kInternal, "model '" + model + "' serves at '" + u.http + "'");
    if (!st.ok()) {
      counters_.failed++;
      return ex->reply_error(st);
    }
    const std::uint64_t rid = next_relay_++;
    auto r = std::make_unique<Relay>(*this, rid, ex, std::move(model), std::move(body), keep_alive, attempt);
    Relay& ref = *r;
    relays_[rid] = std::move(r);
    ref.start(to);
  });
}

void ModelFront::list(const HttpExchangePtr& ex) {
  const std::vector<ModelInfo> resident = host_.models();
  ojson data = ojson::array();
  for (const FrontModel& f : models_) {
    const auto it = std::find_if(resident.begin(), resident.end(), [&](const ModelInfo& m) { return m.id == f.id; });
    const std::string state = it == resident.end() ? "unloaded" : model_state_name(it->state);
    ojson j = {{"id", f.id}, {"object", "model"}, {"owned_by", "umad"}, {"state", state}, {"bytes", f.bytes}};
    if (it != resident.end()) {
      j["loaded_at"] = it->loaded_at_ms;
      j["last_used"] = it->last_used_ms;
      j["keep_alive"] = it->keep_alive_ms;
      j["in_use"] = it->in_use;
    }
    data.push_back(std::move(j));
  }
  ex->reply_json(200, to_json_text(ojson{{"object", "list"}, {"data", data}}));
}

}  // namespace uma::agent
