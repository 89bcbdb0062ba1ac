// The HTTP side of a soak client: the OpenAI API (docs/PROTOCOL.md, "HTTP, OpenAI-compatible").
#include <nlohmann/json.hpp>

#include "httpkit/http_wire.h"
#include "tools/soak/actions.h"
#include "tools/soak/conn.h"

namespace uma::soak {
namespace {

using json = nlohmann::json;

std::string request_bytes(std::string_view method, std::string_view path, std::string_view body, bool close) {
  return http_request({.method = method, .target = path, .host = "soak", .body = body, .keep_alive = !close});
}

struct Completion {
  std::string id;  // ours, for messages
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  std::string body;
  Expected exp;
};

// `model` is echoed in every chunk: a long one makes a stream's bytes outgrow the server's socket
// buffer (64 KiB, doubled by Linux) plus its TX cap, so a slow reader over HTTP can be dropped.
Completion make_completion(ClientState& c, int max_tokens, bool stream, const std::string& model = "soak") {
  Completion r;
  r.id = c.next_id();
  r.stream = stream;
  r.chat = c.settings.chat && c.chance(0.3);
  r.include_usage = stream && c.chance(0.5);
  json j = {{"max_tokens", max_tokens}, {"stream", stream}, {"temperature", 0}, {"model", model}};
  if (r.include_usage) j["stream_options"] = {{"include_usage", true}};
  if (r.chat) {
    const std::string system = c.chance(0.5) ? c.preamble() : "be brief";
    const std::string user = c.words.words(c.uniform(1, 8));
    j["messages"] = json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}});
    r.exp = c.expect.completion(Expectations::render_chat(system, user), max_tokens);
  } else {
    const std::string prompt = c.prompt();
    j[c.chance(0.1) ? "max_completion_tokens" : "max_tokens"] = max_tokens;
    j["prompt"] = c.chance(0.1) ? json::array({prompt}) : json(prompt);
    r.exp = c.expect.completion(prompt, max_tokens);
  }
  r.body = j.dump();
  return r;
}

std::string path_of(const Completion& r) { return r.chat ? "/v1/chat/completions" : "/v1/completions"; }

// Usage against the oracle ("" when right). Chat prompts are counted after the template: only
// the completion tokens are checked there.
std::string check_usage(const Completion& r, const json& usage) {
  if (!usage.is_object()) return "no usage object";
  if (!r.chat && usage.value("prompt_tokens", -1) != r.exp.prompt_tokens) {
    return "usage.prompt_tokens " + usage.value("prompt_tokens", json()).dump() + ", want " + std::to_string(r.exp.prompt_tokens);
  }
  if (r.exp.reason == "length" && usage.value("completion_tokens", -1) != r.exp.completion_tokens) {
    return "usage.completion_tokens " + usage.value("completion_tokens", json()).dump() + ", want " +
           std::to_string(r.exp.completion_tokens);
  }
  return "";
}

// A streamed reply, as far as it went.
struct Sse {
  Read end = Read::kData;
  std::string error;        // socket error or protocol violation
  std::string text;
  int tokens = 0;
  std::string finish;       // the finish_reason seen (once, on the last chunk)
  bool done = false;        // data: [DONE] seen, and the HTTP message ended after it
  bool usage_seen = false;
};

// Reads SSE chunks until [DONE] and the message's end, the connection's end, or `stop_after`
// chunks with text.
// Each event must come within the timeout (a stall is unexpected), however long the stream.
Sse read_sse(HttpReader& rd, const Completion& r, int stop_after, std::chrono::milliseconds timeout) {
  Sse s;
  std::string data;
  bool got_done = false;
  while (true) {
    s.end = rd.next_data(&data, Clock::now() + timeout, &s.error);
    if (s.end == Read::kEof && rd.ended()) {
      s.end = Read::kData;
      s.done = got_done;
      if (!got_done) s.error = "the stream ended without data: [DONE]";
      return s;
    }
    if (s.end != Read::kData) return s;
    if (got_done) {
      s.error = "data after [DONE]: " + quote(data);
      return s;
    }
    if (data == "[DONE]") {
      got_done = true;
      continue;
    }
    const json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      s.error = "an SSE event that is not JSON: " + quote(data);
      return s;
    }
    if (j.contains("error")) {
      s.error = "error event in the stream: " + quote(data, 300);
      return s;
    }
    const json& choices = j.value("choices", json::array());
    if (choices.empty()) {
      if (!r.include_usage || !s.finish.size()) {
        s.error = "an empty choices chunk out of place: " + quote(data);
        return s;
      }
      s.usage_seen = true;
      if (std::string bad = check_usage(r, j.value("usage", json())); !bad.empty()) {
        s.error = bad;
        return s;
      }
      continue;
    }
    if (!s.finish.empty()) {
      s.error = "a chunk after finish_reason: " + quote(data);
      return s;
    }
    const json& ch = choices[0];
    std::string piece;
    if (r.chat) {
      const json& delta = ch.value("delta", json::object());
      if (delta.contains("content") && delta["content"].is_string()) piece = delta["content"].get<std::string>();
    } else if (ch.contains("text") && ch["text"].is_string()) {
      piece = ch["text"].get<std::string>();
    }
    if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) s.finish = ch["finish_reason"].get<std::string>();
    if (!piece.empty()) {
      s.text += piece;
      if (++s.tokens == stop_after) return s;
    }
  }
}

std::string check_sse(const Completion& r, const Sse& s) {
  if (!s.error.empty()) return s.error;
  if (std::string d = diff(r.exp.text, s.text); !d.empty()) return d;
  if (s.finish != r.exp.reason) return "finish_reason " + quote(s.finish) + ", want " + quote(r.exp.reason);
  if (r.include_usage && !s.usage_seen) return "include_usage but no usage chunk";
  return "";
}

std::string check_full(const Completion& r, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
    return "not a completion: " + quote(body, 300);
  }
  const json& ch = j["choices"][0];
  const json text = r.chat ? ch.value("message", json::object()).value("content", json()) : ch.value("text", json());
  if (!text.is_string()) return "no text in " + quote(body, 300);
  if (std::string d = diff(r.exp.text, text.get<std::string>()); !d.empty()) return d;
  if (ch.value("finish_reason", json()) != r.exp.reason) {
    return "finish_reason " + ch.value("finish_reason", json()).dump() + ", want " + r.exp.reason;
  }
  return check_usage(r, j.value("usage", json()));
}

Socket connect(ClientState& c, Action a, int rcvbuf = 0) {
  std::string err;
  Socket s = Socket::tcp(c.settings.http_host, c.settings.http_port, rcvbuf, &err);
  if (!s.valid()) c.fail(a, "-", err);
  return s;
}

// Sends one completion and checks the whole reply; true when exact (recorded).
bool one_completion(ClientState& c, Action a, Socket& s, HttpReader& rd, const Completion& r, bool close) {
  std::string err;
  if (!s.send_all(request_bytes("POST", path_of(r), r.body, close), c.deadline(), &err)) {
    c.fail(a, r.id, err);
    return false;
  }
  if (Read h = rd.header(c.deadline(), &err); h != Read::kData) {
    c.fail(a, r.id, std::string("no response header: ") + describe(h) + " " + err);
    return false;
  }
  if (rd.status() != 200) {
    std::string body;
    rd.body(&body, c.deadline(), &err);
    c.fail(a, r.id, "HTTP " + std::to_string(rd.status()) + ": " + quote(body, 300));
    return false;
  }
  std::string bad;
  std::int64_t tokens = r.exp.completion_tokens;
  if (r.stream) {
    if (rd.header_value("Content-Type").rfind("text/event-stream", 0) != 0) bad = "not an event stream";
    const Sse got = read_sse(rd, r, -1, c.settings.timeout);
    if (bad.empty() && got.end != Read::kData) bad = std::string("stream cut: ") + describe(got.end) + " " + got.error;
    if (bad.empty()) bad = check_sse(r, got);
  } else {
    std::string body;
    if (Read b = rd.body(&body, c.deadline(), &err); b != Read::kData) {
      bad = std::string("body cut: ") + describe(b) + " " + err;
    } else {
      bad = check_full(r, body);
    }
  }
  if (!bad.empty()) {
    c.fail(a, r.id, bad);
    return false;
  }
  c.tally.record(Front::kHttp, a, Outcome::kExact, tokens);
  return true;
}

bool expect_close(ClientState& c, Action a, Socket& s, const std::string& id) {
  std::string err;
  const Read r = s.wait_eof(c.deadline(), &err);
  if (r == Read::kEof) return true;
  c.fail(a, id, std::string("the server did not close: ") + describe(r) + " " + err);
  return false;
}

void complete(ClientState& c, Action a) {
  Socket s = connect(c, a);
  if (!s.valid()) return;
  HttpReader rd(s);
  // Some connections carry several requests (keep-alive); the last may ask the server to close.
  const int n_requests = c.chance(0.2) ? c.uniform(2, 3) : 1;
  const bool close_last = c.chance(0.5);
  for (int i = 0; i < n_requests; ++i) {
    const Completion r = make_completion(c, c.uniform(1, 48), a == Action::kStream);
    const bool close = close_last && i + 1 == n_requests;
    if (!one_completion(c, a, s, rd, r, close)) return;
    if (close) expect_close(c, a, s, r.id);
    rd.reset();
  }
}

// cancel: half-close mid-stream (an HTTP client cancels by going away); the server must end the
// stream and close. disconnect: close (or reset) mid-stream.
void leave_mid_stream(ClientState& c, Action a) {
  Socket s = connect(c, a);
  if (!s.valid()) return;
  HttpReader rd(s);
  const int n = c.uniform(8, 64);
  const Completion r = make_completion(c, n, true);
  const int k = a == Action::kCancel ? c.uniform(0, n / 2) : c.uniform(0, n - 1);
  std::string err;
  if (!s.send_all(request_bytes("POST", path_of(r), r.body, false), c.deadline(), &err)) return c.fail(a, r.id, err);
  if (k == 0 && a == Action::kDisconnect) {
    c.chance(0.5) ? s.close_with_reset() : s.close();
    return c.tally.record(Front::kHttp, a, Outcome::kDisconnected);
  }
  Sse got;
  if (k > 0) {
    if (Read h = rd.header(c.deadline(), &err); h != Read::kData) {
      return c.fail(a, r.id, std::string("no response header: ") + describe(h) + " " + err);
    }
    if (rd.status() != 200) return c.fail(a, r.id, "HTTP " + std::to_string(rd.status()));
    got = read_sse(rd, r, k, c.settings.timeout);
    if (got.end != Read::kData || !got.error.empty()) {
      return c.fail(a, r.id, "stream cut: " + std::string(describe(got.end)) + " " + got.error);
    }
    if (got.done) {  // the stream ended before k tokens
      if (std::string bad = check_sse(r, got); !bad.empty()) return c.fail(a, r.id, bad);
      return c.tally.record(Front::kHttp, a, Outcome::kRaced, got.tokens);
    }
    if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.id, diff(r.exp.text, got.text));
  }
  if (a == Action::kDisconnect) {
    c.chance(0.5) ? s.close_with_reset() : s.close();
    return c.tally.record(Front::kHttp, a, Outcome::kDisconnected, got.tokens);
  }
  s.shutdown_write();
  // What still comes must continue the oracle's text, then the server closes.
  if (k == 0) {
    const Read h = rd.header(c.deadline(), &err);
    if (h == Read::kEof) return c.tally.record(Front::kHttp, a, Outcome::kCancelled);  // closed before the header
    if (h != Read::kData) return c.fail(a, r.id, std::string("after half-close: ") + describe(h) + " " + err);
    if (rd.status() != 200) return c.fail(a, r.id, "HTTP " + std::to_string(rd.status()));
  }
  Sse rest = read_sse(rd, r, -1, c.settings.timeout);
  const std::string text = got.text + rest.text;
  if (rest.end == Read::kData && rest.done) {  // it ended before the server saw us go
    rest.text = text;
    if (std::string bad = check_sse(r, rest); !bad.empty()) return c.fail(a, r.id, bad);
    return c.tally.record(Front::kHttp, a, Outcome::kRaced, got.tokens + rest.tokens);
  }
  if (rest.end != Read::kEof) {
    return c.fail(a, r.id, std::string("after half-close, want the server to close: ") + describe(rest.end) + " " + rest.error);
  }
  if (!is_prefix(r.exp.text, text)) return c.fail(a, r.id, "cancelled stream: " + diff(r.exp.text, text));
  c.tally.record(Front::kHttp, a, Outcome::kCancelled, got.tokens + rest.tokens);
}

void slow_reader(ClientState& c) {
  const Action a = Action::kSlow;
  Socket s = connect(c, a, c.uniform(2048, 8192));
  if (!s.valid()) return;
  HttpReader rd(s, slow_pacing(c));
  const Completion r = make_completion(c, slow_tokens(c), true, "soak-slow-reader-" + std::string(240, 'x'));
  std::string err;
  if (!s.send_all(request_bytes("POST", path_of(r), r.body, true), c.deadline(), &err)) return c.fail(a, r.id, err);
  if (Read h = rd.header(c.deadline(), &err); h != Read::kData) {
    if (h == Read::kStopped) return c.tally.record(Front::kHttp, a, Outcome::kDisconnected);
    return c.fail(a, r.id, std::string("no response header: ") + describe(h) + " " + err);
  }
  if (rd.status() != 200) return c.fail(a, r.id, "HTTP " + std::to_string(rd.status()));
  const Sse got = read_sse(rd, r, -1, c.settings.timeout);
  if (got.end == Read::kStopped) {  // the run ended first: we leave, as a disconnect
    if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.id, diff(r.exp.text, got.text));
    return c.tally.record(Front::kHttp, a, Outcome::kDisconnected, got.tokens);
  }
  const bool cut = got.end == Read::kEof || (got.end == Read::kError && got.error.rfind("recv", 0) == 0);
  if (cut) {  // dropped by the server's TX cap: what arrived must still be the oracle's
    if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.id, "dropped stream: " + diff(r.exp.text, got.text));
    return c.tally.record(Front::kHttp, a, Outcome::kDropped, got.tokens);
  }
  if (got.end != Read::kData) return c.fail(a, r.id, std::string(describe(got.end)) + " " + got.error);
  if (std::string bad = check_sse(r, got); !bad.empty()) return c.fail(a, r.id, bad);
  c.tally.record(Front::kHttp, a, Outcome::kExact, got.tokens);
  expect_close(c, a, s, r.id);
}

struct BadInput {
  std::string name;
  std::string bytes;
  unsigned status;
  std::string code;         // error.code in OpenAI's error shape
  bool reusable = false;    // the connection stays open for the next request
  unsigned alt_status = 0;  // another acceptable status (0: none)
};

std::vector<BadInput> bad_inputs(const Settings& st) {
  auto post = [](const std::string& body, const char* path = "/v1/completions") { return request_bytes("POST", path, body, false); };
  const char* chat = "/v1/chat/completions";
  std::vector<BadInput> t = {
      {"invalid_json", post(R"({"prompt": "hello",)"), 400, "invalid_json", true},
      {"not_an_object", post("[1,2]"), 400, "bad_request", true},
      {"missing_prompt", post(R"({"max_tokens": 4})"), 400, "bad_request", true},
      {"prompt_not_string", post(R"({"prompt": 42})"), 400, "bad_request", true},
      {"empty_prompt", post(R"({"prompt": ""})"), 400, "bad_request", true},
      {"max_tokens_string", post(R"({"prompt": "hello", "max_tokens": "ten"})"), 400, "bad_request", true},
      {"max_tokens_zero", post(R"({"prompt": "hello", "max_tokens": 0})"), 400, "bad_request", true},
      {"max_tokens_huge", post(R"({"prompt": "hello", "max_tokens": 3000000000})"), 400, "bad_request", true},
      {"temperature_range", post(R"({"prompt": "hello", "temperature": 5})"), 400, "bad_request", true},
      {"n_two", post(R"({"prompt": "hello", "n": 2})"), 400, "bad_request", true},
      {"stream_not_bool", post(R"({"prompt": "hello", "stream": "yes"})"), 400, "bad_request", true},
      {"stop_too_many", post(R"({"prompt": "hello", "stop": ["a","b","c","d","e"]})"), 400, "bad_request", true},
      {"chat_no_messages", post(R"({"messages": []})", chat), 400, "bad_request", true},
      {"chat_content_number", post(R"({"messages": [{"role": "user", "content": 5}]})", chat), 400, "bad_request", true},
      {"chat_no_role", post(R"({"messages": [{"content": "hello"}]})", chat), 400, "bad_request", true},
      {"unknown_path", request_bytes("GET", "/v1/nothing", "", false), 404, "bad_request", true},
      {"wrong_method", request_bytes("GET", "/v1/completions", "", false), 405, "bad_request", true},
      {"garbage_request_line", "GARBAGE\r\n\r\n", 400, "bad_request"},
      {"bad_content_length", "POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Length: zz\r\n\r\n", 400, "bad_request"},
      {"header_without_colon", "GET /health HTTP/1.1\r\nHost soak\r\n\r\n", 400, "bad_request"},
      // Only the header: the server answers from Content-Length alone, before any body is sent.
      {"body_too_large", "POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(st.http_max_body_bytes + 1) + "\r\n\r\n", 413, "prompt_too_large"},
  };
  const std::string big = "{\"prompt\": \"" + std::string(st.max_prompt_bytes + 1, 'a') + "\"}";
  if (big.size() <= st.http_max_body_bytes) t.push_back({"prompt_too_large", post(big), 413, "prompt_too_large", true});
  if (std::string p = over_context_prompt(st); !p.empty()) {
    const std::string body = json{{"prompt", p}, {"max_tokens", 1}}.dump();
    if (body.size() <= st.http_max_body_bytes) t.push_back({"over_context", post(body), 400, "context_exceeded", true});
  }
  {
    // Inputs that once aborted umad (an exception escaping a handler).
    t.push_back({"include_usage_not_bool", post(R"({"prompt": "hello", "stream": true, "stream_options": {"include_usage": 1}})"),
                 400, "bad_request", true});
    t.push_back({"chat_part_type_number", post(R"({"messages": [{"role": "user", "content": [{"type": 1, "text": "hi"}]}]})", chat),
                 400, "bad_request", true});
    t.push_back({"path_not_utf8", request_bytes("GET", "/\xff\xfe", "", false), 404, "bad_request", true, 400});
  }
  return t;
}

void malformed(ClientState& c) {
  const Action a = Action::kMalformed;
  const std::vector<BadInput> table = bad_inputs(c.settings);
  const BadInput& bad = table[static_cast<std::size_t>(c.uniform(0, static_cast<int>(table.size()) - 1))];
  Socket s = connect(c, a);
  if (!s.valid()) return;
  HttpReader rd(s);
  std::string err, body;
  if (!s.send_all(bad.bytes, c.deadline(), &err)) return c.fail(a, bad.name, err);
  if (Read h = rd.header(c.deadline(), &err); h != Read::kData) {
    return c.fail(a, bad.name, std::string("no response: ") + describe(h) + " " + err);
  }
  if (Read b = rd.body(&body, c.deadline(), &err); b != Read::kData) {
    return c.fail(a, bad.name, std::string("body cut: ") + describe(b) + " " + err);
  }
  const json j = json::parse(body, nullptr, false);
  const json e = j.is_object() ? j.value("error", json()) : json();
  const std::string want_type = bad.code == "context_exceeded" ? "exceed_context_size_error" : "invalid_request_error";
  const bool status_ok = rd.status() == bad.status || (bad.alt_status != 0 && rd.status() == bad.alt_status);
  if (!status_ok || !e.is_object() || !e.value("message", json()).is_string() ||
      e.value("type", json()) != want_type || !e.contains("param") || e.value("code", json()) != bad.code) {
    return c.fail(a, bad.name, "want HTTP " + std::to_string(bad.status) + " with code " + bad.code + ", got HTTP " +
                                   std::to_string(rd.status()) + " " + quote(body, 300));
  }
  c.tally.record(Front::kHttp, a, Outcome::kTypedError);
  if (!rd.keep_alive()) {
    expect_close(c, a, s, bad.name);
  } else if (bad.reusable && c.chance(0.5)) {
    // The connection survives the error: a good request on it must be served exactly.
    rd.reset();
    const Completion r = make_completion(c, c.uniform(1, 24), false);
    if (one_completion(c, Action::kFull, s, rd, r, true)) expect_close(c, Action::kFull, s, r.id);
  }
}

void probe(ClientState& c) {
  const Action a = Action::kProbe;
  const int which = c.uniform(0, 2);
  const char* path = which == 0 ? "/health" : which == 1 ? "/v1/models" : "/metrics";
  Socket s = connect(c, a);
  if (!s.valid()) return;
  HttpReader rd(s);
  std::string err, body;
  if (!s.send_all(request_bytes("GET", path, "", true), c.deadline(), &err)) return c.fail(a, path, err);
  if (Read h = rd.header(c.deadline(), &err); h != Read::kData) {
    return c.fail(a, path, std::string("no response: ") + describe(h) + " " + err);
  }
  if (Read b = rd.body(&body, c.deadline(), &err); b != Read::kData) return c.fail(a, path, "body cut: " + err);
  const char* want = which == 0 ? "\"status\":\"ok\"" : which == 1 ? "\"data\"" : "uma_kv_cache_tokens_used";
  if (rd.status() != 200 || body.find(want) == std::string::npos) {
    return c.fail(a, path, "HTTP " + std::to_string(rd.status()) + " " + quote(body, 200));
  }
  if (expect_close(c, a, s, path)) c.tally.record(Front::kHttp, a, Outcome::kProbeOk);
}

}  // namespace

void run_http(ClientState& c, Action a) {
  switch (a) {
    case Action::kStream:
    case Action::kFull: return complete(c, a);
    case Action::kCancel:
    case Action::kDisconnect: return leave_mid_stream(c, a);
    case Action::kSlow: return slow_reader(c);
    case Action::kMalformed: return malformed(c);
    case Action::kProbe: return probe(c);
  }
}

}  // namespace uma::soak
