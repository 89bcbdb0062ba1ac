#include "tools/bench/targets.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "client/uma_client.h"
#include "httpkit/http_wire.h"

namespace uma::bench {
namespace {

namespace asio = boost::asio;

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

// OpenAI-style /v1/completions, stream: true, parsed as server-sent events.
class HttpTarget final : public Target {
 public:
  HttpTarget(std::string host, std::string port) : host_(std::move(host)), port_(std::move(port)) {}
  std::string describe() const override { return "OpenAI-compatible HTTP at " + host_ + ":" + port_; }

  RequestRecord run(const BenchRequest& req) override {
    RequestRecord rec;
    rec.klass = req.klass;
    rec.sent = Clock::now();
    try {
      asio::io_context io;
      asio::ip::tcp::resolver resolver(io);
      asio::ip::tcp::socket sock(io);
      asio::connect(sock, resolver.resolve(host_, port_));
      sock.set_option(asio::ip::tcp::no_delay(true));
      nlohmann::json body = {{"prompt", req.prompt}, {"max_tokens", req.max_tokens}, {"stream", true},
                             {"temperature", 0}, {"stream_options", {{"include_usage", true}}}};
      if (req.ignore_eos) body["ignore_eos"] = true;
      if (req.min_tokens > 0) body["min_tokens"] = req.min_tokens;
      const std::string text = body.dump();
      asio::write(sock, asio::buffer("POST /v1/completions HTTP/1.1\r\nHost: " + host_ +
                                     "\r\nContent-Type: application/json\r\nContent-Length: " +
                                     std::to_string(text.size()) + "\r\n\r\n" + text));
      ResponseReader rx;
      SseSplitter sse;
      char chunk[8192];
      std::string bytes, error;
      bool head_checked = false;
      while (!rx.done()) {
        boost::system::error_code ec;
        // read_some, not read: read() would wait to fill the buffer, stamping tokens in bursts.
        const std::size_t n = sock.read_some(asio::buffer(chunk), ec);
        if (ec == asio::error::eof) {
          if (!rx.eof()) return fail(rec, "http_read");
        } else if (ec) {
          return fail(rec, "http_read");
        }
        rx.feed(std::string_view(chunk, n));
        bytes.clear();
        if (!rx.pump(&bytes, &error)) return fail(rec, "http_read");
        if (!head_checked && rx.head_done()) {
          head_checked = true;
          if (rx.status() != 200) return fail(rec, "http_" + std::to_string(rx.status()));
        }
        sse.feed(bytes);
        if (consume_events(sse, rec)) break;
      }
      if (!rec.ok) return fail(rec, rec.error.empty() ? "no_done" : rec.error);
      rec.done = Clock::now();
      if (rec.completion_tokens == 0) rec.completion_tokens = static_cast<std::int32_t>(rec.tokens.size());
      return rec;
    } catch (const std::exception& e) {
      return fail(rec, "http_error");
    }
  }

 private:
  // Handles every complete `data:` line; returns true at "data: [DONE]".
  static bool consume_events(SseSplitter& sse, RequestRecord& rec) {
    std::string data;
    while (sse.next(&data)) {
      if (data == "[DONE]") {
        rec.ok = true;
        return true;
      }
      const nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {  // an error event inside the stream
        rec.error = "server_error";
        return true;
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const auto& c = j["choices"][0];
        if (c.contains("text") && c["text"].is_string() && !c["text"].get_ref<const std::string&>().empty()) {
          rec.tokens.push_back(Clock::now());
        }
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        rec.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        rec.completion_tokens = j["usage"].value("completion_tokens", 0);
      }
    }
    return false;
  }
  static RequestRecord& fail(RequestRecord& rec, const std::string& why) {
    rec.ok = false;
    rec.error = why;
    rec.done = Clock::now();
    return rec;
  }
  std::string host_, port_;
};

}  // namespace

std::unique_ptr<Target> make_target(const std::string& spec, std::string* error) {
  if (spec.rfind("uds:", 0) == 0) return std::make_unique<UdsTarget>(spec.substr(4));
  if (spec.rfind("http://", 0) == 0) {
    std::string hostport = spec.substr(7);
    if (const auto slash = hostport.find('/'); slash != std::string::npos) hostport.resize(slash);
    const auto colon = hostport.rfind(':');
    if (colon == std::string::npos) return std::make_unique<HttpTarget>(hostport, "80");
    return std::make_unique<HttpTarget>(hostport.substr(0, colon), hostport.substr(colon + 1));
  }
  *error = "target must be uds:PATH or http://HOST:PORT, got '" + spec + "'";
  return nullptr;
}

}  // namespace uma::bench
