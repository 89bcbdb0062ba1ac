// The Unix-socket side of a soak client: framed JSON requests (docs/PROTOCOL.md, "Framed JSON v1").
#include <cstring>

#include "ipc/frame_codec.h"
#include "ipc/json_messages.h"
#include "tools/soak/actions.h"
#include "tools/soak/conn.h"

namespace uma::soak {
namespace {

std::string framed(std::string_view payload) {
  std::string f;
  append_frame(f, payload);
  return f;
}

struct Req {
  WireRequest wire;
  Expected exp;
};

Req make_request(ClientState& c, int max_tokens, bool stream, bool keep_alive = false) {
  Req r;
  r.wire.id = c.next_id();
  r.wire.prompt = c.prompt();
  r.wire.max_tokens = max_tokens;
  r.wire.stream = stream;
  r.wire.keep_alive = keep_alive;
  r.exp = c.expect.completion(r.wire.prompt, max_tokens);
  return r;
}

// Checks an eos against the oracle; "" when it is exactly right.
std::string check_eos(const Req& r, const WireEvent& ev, const std::string& streamed) {
  const std::string& text = r.wire.stream ? streamed : ev.text;
  if (std::string d = diff(r.exp.text, text); !d.empty()) return d;
  if (ev.reason != r.exp.reason) return "reason " + quote(ev.reason) + ", want " + quote(r.exp.reason);
  if (ev.prompt_tokens != r.exp.prompt_tokens) {
    return "usage.prompt_tokens " + std::to_string(ev.prompt_tokens) + ", want " + std::to_string(r.exp.prompt_tokens);
  }
  if (r.exp.reason == "length" && ev.completion_tokens != r.exp.completion_tokens) {
    return "usage.completion_tokens " + std::to_string(ev.completion_tokens) + ", want " +
           std::to_string(r.exp.completion_tokens);
  }
  return "";
}

// The stream of one request up to its end (or until `stop_after` tokens when >= 0).
struct Streamed {
  Read end = Read::kData;  // kData: eos or error in `last`
  WireEvent last;
  std::string text;
  int tokens = 0;
  std::string error;       // the socket's, or a protocol violation
};

// Each event must come within the timeout (a stall is unexpected), however long the stream.
Streamed read_stream(EventReader& rd, const Req& r, int stop_after, std::chrono::milliseconds timeout) {
  Streamed s;
  while (true) {
    WireEvent ev;
    s.end = rd.next(&ev, Clock::now() + timeout, &s.error);
    if (s.end != Read::kData) return s;
    if (ev.kind == WireEvent::Kind::kError || ev.kind == WireEvent::Kind::kEos) {
      s.last = std::move(ev);
      if (s.last.id != r.wire.id) s.error = "event for id " + quote(s.last.id) + " on " + r.wire.id + "'s connection";
      return s;
    }
    if (ev.kind != WireEvent::Kind::kToken || ev.id != r.wire.id || !r.wire.stream) {
      s.end = Read::kError;
      s.error = "unexpected event " + quote(ev.raw);
      return s;
    }
    s.text += ev.text;
    if (++s.tokens == stop_after) return s;
  }
}

// After a reply without keep_alive the server closes: anything else is unexpected.
bool expect_close(ClientState& c, Action a, Socket& s, const std::string& id) {
  std::string err;
  const Read r = s.wait_eof(c.deadline(), &err);
  if (r == Read::kEof) return true;
  c.fail(a, id, std::string("the server did not close after the reply: ") + describe(r) + " " + err);
  return false;
}

std::string ended_badly(const Streamed& s) {
  if (!s.error.empty() && s.end == Read::kData) return s.error;
  if (s.end != Read::kData) {
    return std::string("stream ended before eos (") + describe(s.end) + (s.error.empty() ? "" : ": " + s.error) +
           ") after " + std::to_string(s.tokens) + " tokens";
  }
  if (s.last.kind == WireEvent::Kind::kError) return "error event " + s.last.code + ": " + s.last.message;
  return "";
}

void complete(ClientState& c, Action a) {
  const bool stream = a == Action::kStream;
  std::string err;
  Socket s = Socket::unix_stream(c.settings.socket_path, &err);
  if (!s.valid()) return c.fail(a, "-", err);
  EventReader rd(s, c.settings.max_frame_bytes);
  // Some connections carry several requests (keep_alive); some half-close after sending.
  const int n_requests = c.chance(0.2) ? c.uniform(2, 3) : 1;
  const bool half_close = n_requests == 1 && c.chance(0.15);
  for (int i = 0; i < n_requests; ++i) {
    const Req r = make_request(c, c.uniform(1, 48), stream, i + 1 < n_requests);
    if (!s.send_all(framed(encode_request(r.wire)), c.deadline(), &err)) return c.fail(a, r.wire.id, err);
    if (half_close) s.shutdown_write();
    const Streamed got = read_stream(rd, r, -1, c.settings.timeout);
    if (std::string bad = ended_badly(got); !bad.empty()) return c.fail(a, r.wire.id, bad);
    if (std::string bad = check_eos(r, got.last, got.text); !bad.empty()) return c.fail(a, r.wire.id, bad);
    c.tally.record(Front::kUds, a, Outcome::kExact, got.last.completion_tokens);
    if (i + 1 == n_requests) expect_close(c, a, s, r.wire.id);
  }
}

void cancel(ClientState& c) {
  const Action a = Action::kCancel;
  std::string err;
  Socket s = Socket::unix_stream(c.settings.socket_path, &err);
  if (!s.valid()) return c.fail(a, "-", err);
  EventReader rd(s, c.settings.max_frame_bytes);
  const int n = c.uniform(8, 64);
  const Req r = make_request(c, n, true);
  const int k = c.uniform(0, n / 2);  // tokens before the cancel (0: at once, maybe mid-prefill)
  std::string out = framed(encode_request(r.wire));
  if (k == 0) out += framed(encode_cancel(r.wire.id));
  if (!s.send_all(out, c.deadline(), &err)) return c.fail(a, r.wire.id, err);
  Streamed got;
  if (k > 0) {
    got = read_stream(rd, r, k, c.settings.timeout);
    if (got.end == Read::kData && got.error.empty() && got.tokens == k) {
      if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.wire.id, diff(r.exp.text, got.text));
      if (!s.send_all(framed(encode_cancel(r.wire.id)), c.deadline(), &err)) return c.fail(a, r.wire.id, err);
      Streamed rest = read_stream(rd, r, -1, c.settings.timeout);
      rest.text = got.text + rest.text;
      rest.tokens += got.tokens;
      got = std::move(rest);
    }
  } else {
    got = read_stream(rd, r, -1, c.settings.timeout);
  }
  if (std::string bad = ended_badly(got); !bad.empty()) return c.fail(a, r.wire.id, bad);
  if (got.last.reason == "cancelled") {
    if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.wire.id, "cancelled stream: " + diff(r.exp.text, got.text));
    c.tally.record(Front::kUds, a, Outcome::kCancelled, got.tokens);
  } else {
    // The stream ended before the cancel was read: then it must be whole and exact.
    if (std::string bad = check_eos(r, got.last, got.text); !bad.empty()) {
      return c.fail(a, r.wire.id, "not cancelled (reason " + quote(got.last.reason) + "): " + bad);
    }
    c.tally.record(Front::kUds, a, Outcome::kRaced, got.tokens);
  }
  expect_close(c, a, s, r.wire.id);
}

void disconnect(ClientState& c) {
  const Action a = Action::kDisconnect;
  std::string err;
  Socket s = Socket::unix_stream(c.settings.socket_path, &err);
  if (!s.valid()) return c.fail(a, "-", err);
  EventReader rd(s, c.settings.max_frame_bytes);
  const int n = c.uniform(8, 64);
  const Req r = make_request(c, n, true);
  const int k = c.uniform(0, n - 1);  // tokens before closing (0: at once, maybe mid-prefill)
  if (!s.send_all(framed(encode_request(r.wire)), c.deadline(), &err)) return c.fail(a, r.wire.id, err);
  if (k == 0) {
    s.close();
    return c.tally.record(Front::kUds, a, Outcome::kDisconnected);
  }
  const Streamed got = read_stream(rd, r, k, c.settings.timeout);
  if (std::string bad = ended_badly(got); !bad.empty()) return c.fail(a, r.wire.id, bad);
  if (got.end == Read::kData && got.last.kind == WireEvent::Kind::kEos) {  // ended before k tokens
    if (std::string bad = check_eos(r, got.last, got.text); !bad.empty()) return c.fail(a, r.wire.id, bad);
    return c.tally.record(Front::kUds, a, Outcome::kRaced, got.tokens);
  }
  if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.wire.id, diff(r.exp.text, got.text));
  s.close();
  c.tally.record(Front::kUds, a, Outcome::kDisconnected, got.tokens);
}

void slow_reader(ClientState& c) {
  const Action a = Action::kSlow;
  std::string err;
  Socket s = Socket::unix_stream(c.settings.socket_path, &err);
  if (!s.valid()) return c.fail(a, "-", err);
  EventReader rd(s, c.settings.max_frame_bytes, slow_pacing(c));
  const Req r = make_request(c, slow_tokens(c), true);
  if (!s.send_all(framed(encode_request(r.wire)), c.deadline(), &err)) return c.fail(a, r.wire.id, err);
  const Streamed got = read_stream(rd, r, -1, c.settings.timeout);
  if (got.end == Read::kStopped) {  // the run ended first: we leave, as a disconnect
    if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.wire.id, diff(r.exp.text, got.text));
    return c.tally.record(Front::kUds, a, Outcome::kDisconnected, got.tokens);
  }
  if (got.end == Read::kEof || got.end == Read::kError) {
    // Dropped by the server's TX cap: what arrived must still be the oracle's.
    if (!got.error.empty() && got.end == Read::kError && got.error.find("recv") == std::string::npos) {
      return c.fail(a, r.wire.id, got.error);
    }
    if (!is_prefix(r.exp.text, got.text)) return c.fail(a, r.wire.id, "dropped stream: " + diff(r.exp.text, got.text));
    return c.tally.record(Front::kUds, a, Outcome::kDropped, got.tokens);
  }
  if (std::string bad = ended_badly(got); !bad.empty()) return c.fail(a, r.wire.id, bad);
  if (std::string bad = check_eos(r, got.last, got.text); !bad.empty()) return c.fail(a, r.wire.id, bad);
  c.tally.record(Front::kUds, a, Outcome::kExact, got.tokens);
  expect_close(c, a, s, r.wire.id);
}

struct BadInput {
  std::string name;
  std::string bytes;  // framed (or a bare header)
  std::string code;   // the error event's code
};

std::vector<BadInput> bad_inputs(const Settings& st, ClientState& c) {
  const std::string id = "\"id\":\"" + c.next_id() + "\"";
  auto req = [&](const std::string& fields) { return framed("{" + id + "," + fields + "}"); };
  std::vector<BadInput> t = {
      {"invalid_json", framed("{" + id + ",\"prompt\":"), "E_PROTO_INVALID_JSON"},
      {"not_utf8", framed("{" + id + ",\"prompt\":\"\xff\xfe\"}"), "E_PROTO_INVALID_JSON"},
      {"not_an_object", framed("[1,2,3]"), "E_PROTO_BAD_REQUEST"},
      {"missing_prompt", framed("{" + id + "}"), "E_PROTO_BAD_REQUEST"},
      {"id_not_string", framed(R"({"id":5,"prompt":"hello"})"), "E_PROTO_BAD_REQUEST"},
      {"max_tokens_string", req(R"("prompt":"hello","max_tokens":"ten")"), "E_PROTO_BAD_REQUEST"},
      {"max_tokens_zero", req(R"("prompt":"hello","max_tokens":0)"), "E_PROTO_BAD_REQUEST"},
      {"max_tokens_huge", req(R"("prompt":"hello","max_tokens":3000000000)"), "E_PROTO_BAD_REQUEST"},
      {"temperature_negative", req(R"("prompt":"hello","temperature":-1)"), "E_PROTO_BAD_REQUEST"},
      {"stop_not_array", req(R"("prompt":"hello","stop":"x")"), "E_PROTO_BAD_REQUEST"},
      {"priority_unknown", req(R"("prompt":"hello","priority":"urgent")"), "E_PROTO_BAD_REQUEST"},
      {"stream_not_bool", req(R"("prompt":"hello","stream":1)"), "E_PROTO_BAD_REQUEST"},
      {"empty_prompt", req(R"("prompt":"")"), "E_PROTO_BAD_REQUEST"},
      {"nul_in_prompt", req(R"("prompt":"a\u0000b")"), "E_PROTO_BAD_REQUEST"},
      {"unknown_type", framed(R"({"type":"bogus"})"), "E_PROTO_BAD_REQUEST"},
      {"unknown_event", req(R"("event":"pause")"), "E_PROTO_BAD_REQUEST"},
      {"prompt_too_large", req("\"prompt\":\"" + std::string(st.max_prompt_bytes + 1, 'a') + "\""), "E_LIMIT_PROMPT_TOO_LARGE"},
  };
  // A header announcing a frame over --max-frame-bytes (no payload follows).
  std::string header(4, '\0');
  const auto len = static_cast<std::uint32_t>(std::min<std::size_t>(st.max_frame_bytes + 1, 0xffffffffu));
  for (int i = 0; i < 4; ++i) header[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  t.push_back({"frame_too_large", header, "E_PROTO_FRAME_TOO_LARGE"});
  if (std::string p = over_context_prompt(st); !p.empty()) {
    WireRequest w;
    w.id = c.next_id();
    w.prompt = std::move(p);
    w.max_tokens = 1;
    t.push_back({"over_context", framed(encode_request(w)), "E_LIMIT_CONTEXT"});
  }
  return t;
}

// A second request while one is in flight: E_BUSY for it, and the first goes on exactly.
void busy(ClientState& c) {
  const Action a = Action::kMalformed;
  std::string err;
  Socket s = Socket::unix_stream(c.settings.socket_path, &err);
  if (!s.valid()) return c.fail(a, "-", err);
  EventReader rd(s, c.settings.max_frame_bytes);
  const Req first = make_request(c, c.uniform(16, 48), true, /*keep_alive=*/true);
  const Req second = make_request(c, 4, true);
  if (!s.send_all(framed(encode_request(first.wire)) + framed(encode_request(second.wire)), c.deadline(), &err)) {
    return c.fail(a, first.wire.id, err);
  }
  std::string text;
  bool busy_seen = false, eos_seen = false;
  while (!(busy_seen && eos_seen)) {
    WireEvent ev;
    const Read r = rd.next(&ev, c.deadline(), &err);
    if (r != Read::kData) return c.fail(a, first.wire.id, std::string("busy case: ") + describe(r) + " " + err);
    if (ev.id == second.wire.id && ev.kind == WireEvent::Kind::kError && ev.code == "E_BUSY" && !busy_seen) {
      busy_seen = true;
    } else if (ev.id == first.wire.id && ev.kind == WireEvent::Kind::kToken && !eos_seen) {
      text += ev.text;
    } else if (ev.id == first.wire.id && ev.kind == WireEvent::Kind::kEos && !eos_seen) {
      if (std::string bad = check_eos(first, ev, text); !bad.empty()) return c.fail(a, first.wire.id, "busy case: " + bad);
      eos_seen = true;
    } else {
      return c.fail(a, first.wire.id, "busy case: unexpected event " + quote(ev.raw));
    }
  }
  c.tally.record(Front::kUds, a, Outcome::kTypedError, static_cast<std::int64_t>(first.exp.completion_tokens));
}

void malformed(ClientState& c) {
  const Action a = Action::kMalformed;
  std::vector<BadInput> table = bad_inputs(c.settings, c);
  const int pick = c.uniform(0, static_cast<int>(table.size()));  // one past the table: the busy case
  if (pick == static_cast<int>(table.size())) return busy(c);
  const BadInput& bad = table[static_cast<std::size_t>(pick)];
  std::string err;
  Socket s = Socket::unix_stream(c.settings.socket_path, &err);
  if (!s.valid()) return c.fail(a, bad.name, err);
  EventReader rd(s, c.settings.max_frame_bytes);
  if (!s.send_all(bad.bytes, c.deadline(), &err)) return c.fail(a, bad.name, err);
  WireEvent ev;
  const Read r = rd.next(&ev, c.deadline(), &err);
  if (r != Read::kData) return c.fail(a, bad.name, std::string("no error event: ") + describe(r) + " " + err);
  if (ev.kind != WireEvent::Kind::kError || ev.code != bad.code) {
    return c.fail(a, bad.name, "want error " + bad.code + ", got " + quote(ev.raw));
  }
  if (expect_close(c, a, s, bad.name)) c.tally.record(Front::kUds, a, Outcome::kTypedError);
}

void probe(ClientState& c) {
  const Action a = Action::kProbe;
  const bool prometheus = c.chance(0.3);
  std::string err;
  Socket s = Socket::unix_stream(c.settings.socket_path, &err);
  if (!s.valid()) return c.fail(a, "metrics", err);
  EventReader rd(s, c.settings.max_frame_bytes);
  if (!s.send_all(framed(encode_metrics_request(prometheus)), c.deadline(), &err)) return c.fail(a, "metrics", err);
  WireEvent ev;
  const Read r = rd.next(&ev, c.deadline(), &err);
  if (r != Read::kData) return c.fail(a, "metrics", std::string("no metrics event: ") + describe(r) + " " + err);
  const bool ok = ev.kind == WireEvent::Kind::kMetrics &&
                  (prometheus ? ev.text.find("uma_kv_cache_tokens_used") != std::string::npos
                              : ev.raw.find("\"kv_tokens_used\"") != std::string::npos);
  if (!ok) return c.fail(a, "metrics", "not a metrics event: " + quote(ev.raw));
  if (expect_close(c, a, s, "metrics")) c.tally.record(Front::kUds, a, Outcome::kProbeOk);
}

}  // namespace

void run_uds(ClientState& c, Action a) {
  switch (a) {
    case Action::kStream:
    case Action::kFull: return complete(c, a);
    case Action::kCancel: return cancel(c);
    case Action::kDisconnect: return disconnect(c);
    case Action::kSlow: return slow_reader(c);
    case Action::kMalformed: return malformed(c);
    case Action::kProbe: return probe(c);
  }
}

}  // namespace uma::soak
