#include "tools/bench/targets.h"

#include <nlohmann/json.hpp>

#include <mutex>
#include <vector>

#include "client/uma_client.h"
#include "httpkit/http_client.h"

namespace uma::bench {
namespace {

class UdsTarget final : public Target {
 public:
  explicit UdsTarget(std::string path) : path_(std::move(path)) {}
  std::string describe() const override { return "umad (framed JSON over " + path_ + ")"; }

  RequestRecord run(const BenchRequest& req) override {
    RequestRecord rec;
    rec.klass = req.klass;
    rec.sent = Clock::now();
    Status st;
    auto c = UmaClient::connect(path_, &st);
    if (!c) return fail(rec, "connect");
    WireRequest w;
    w.id = req.id;
    w.prompt = req.prompt;
    w.max_tokens = req.max_tokens;
    w.background = req.klass == "background";  // umad's request class; HTTP targets have none
    w.json_schema = req.json_schema;
    w.sampling.ignore_eos = req.ignore_eos;
    w.sampling.min_tokens = req.min_tokens;
    if (!c->send_request(w).ok()) return fail(rec, "send");
    WireEvent ev;
    while ((st = c->read_event(&ev, 600000)).ok()) {
      if (ev.kind == WireEvent::Kind::kToken) {
        rec.tokens.push_back(Clock::now());
      } else if (ev.kind == WireEvent::Kind::kEos) {
        rec.done = Clock::now();
        rec.ok = true;
        rec.prompt_tokens = ev.prompt_tokens;
        rec.completion_tokens = ev.completion_tokens;
        return rec;
      } else if (ev.kind == WireEvent::Kind::kError) {
        return fail(rec, ev.code);
      }
    }
    return fail(rec, "disconnected");
  }

 private:
  static RequestRecord& fail(RequestRecord& rec, const std::string& why) {
    rec.ok = false;
    rec.error = why;
    rec.done = Clock::now();
    return rec;
  }
  std::string path_;
};

// OpenAI-style /v1/completions, stream: true, parsed as server-sent events, with httpkit's
// blocking client. With keep-alive, connections a request ended with wait in a pool for the next
// (as SDK clients keep theirs); without, every request dials its own.
class HttpTarget final : public Target {
 public:
  HttpTarget(std::string host, int port, bool keep_alive) : host_(std::move(host)), port_(port), keep_alive_(keep_alive) {}
  std::string describe() const override {
    return "OpenAI-compatible HTTP at " + host_ + ":" + std::to_string(port_) + (keep_alive_ ? " (keep-alive)" : "");
  }

  RequestRecord run(const BenchRequest& req) override {
    RequestRecord rec;
    rec.klass = req.klass;
    rec.sent = Clock::now();
    nlohmann::json body = {{"prompt", req.prompt}, {"max_tokens", req.max_tokens}, {"stream", true},
                           {"temperature", 0}, {"stream_options", {{"include_usage", true}}}};
    if (req.ignore_eos) body["ignore_eos"] = true;
    if (req.min_tokens > 0) body["min_tokens"] = req.min_tokens;
    std::unique_ptr<HttpClient> c = take();
    const auto deadline = Clock::now() + std::chrono::minutes(10);
    std::string error, data;
    if (c->request("POST", "/v1/completions", body.dump(), deadline, &error) != Read::kData) return fail(rec, "http_read");
    if (c->response().status() != 200) return fail(rec, "http_" + std::to_string(c->response().status()));
    Read r;
    while ((r = c->response().next_data(&data, deadline, &error)) == Read::kData) {
      if (consume_event(data, rec)) break;
    }
    if (r == Read::kData && rec.ok) {  // after [DONE]: the message's end, so the connection can serve on
      while ((r = c->response().next_data(&data, deadline, &error)) == Read::kData) {
      }
    }
    if (!rec.ok) return fail(rec, rec.error.empty() ? (r == Read::kEof ? "no_done" : "http_read") : rec.error);
    rec.done = Clock::now();
    if (rec.completion_tokens == 0) rec.completion_tokens = static_cast<std::int32_t>(rec.tokens.size());
    c->finish();
    give(std::move(c));
    return rec;
  }

 private:
  std::unique_ptr<HttpClient> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.empty()) return std::make_unique<HttpClient>(host_, port_, keep_alive_);
    std::unique_ptr<HttpClient> c = std::move(idle_.back());
    idle_.pop_back();
    return c;
  }
  void give(std::unique_ptr<HttpClient> c) {
    if (!keep_alive_) return;
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(c));
  }
  // One `data:` payload; true at "data: [DONE]" or an error event.
  static bool consume_event(const std::string& data, RequestRecord& rec) {
    if (data == "[DONE]") {
      rec.ok = true;
      return true;
    }
    const nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded()) return false;
    if (j.contains("error")) {  // an error event inside the stream
      rec.error = "server_error";
      return true;
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const auto& ch = j["choices"][0];
      if (ch.contains("text") && ch["text"].is_string() && !ch["text"].get_ref<const std::string&>().empty()) {
        rec.tokens.push_back(Clock::now());
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      rec.prompt_tokens = j["usage"].value("prompt_tokens", 0);
      rec.completion_tokens = j["usage"].value("completion_tokens", 0);
    }
    return false;
  }
  static RequestRecord& fail(RequestRecord& rec, const std::string& why) {
    rec.ok = false;
    rec.error = why;
    rec.done = Clock::now();
    return rec;
  }
  std::string host_;
  int port_;
  bool keep_alive_;
  std::mutex mu_;
  std::vector<std::unique_ptr<HttpClient>> idle_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<Target> make_target(const std::string& spec, std::string* error, bool keep_alive) {
  if (spec.rfind("uds:", 0) == 0) return std::make_unique<UdsTarget>(spec.substr(4));
  if (spec.rfind("http://", 0) == 0) {
    std::string hostport = spec.substr(7);
    if (const auto slash = hostport.find('/'); slash != std::string::npos) hostport.resize(slash);
    const auto colon = hostport.rfind(':');
    int port = 80;
    if (colon != std::string::npos) {
      const std::string digits = hostport.substr(colon + 1);
      port = digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos
                 ? -1 : std::stoi(digits);
      hostport.resize(colon);
    }
    if (port <= 0 || port > 65535) {
      *error = "bad port in '" + spec + "'";
      return nullptr;
    }
    return std::make_unique<HttpTarget>(hostport, port, keep_alive);
  }
  *error = "target must be uds:PATH or http://HOST:PORT, got '" + spec + "'";
  return nullptr;
}

}  // namespace uma::bench
