// uma-protocol-bench: two figures for the framed JSON protocol.
//   uma-protocol-bench framing            per-token cost of JSON framing and of the OpenAI SSE chunk
//                                         vs the newline encoding
//   uma-protocol-bench cancel SOCKET [N] [MAX_DELAY_MS]  cancel latency against a running umad:
//                                         cancel frame sent -> eos(cancelled) received, p50/p99
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "client/uma_client.h"
#include "http/openai.h"
#include "ipc/frame_codec.h"
#include "ipc/json_messages.h"
#include "ipc/newline_wire.h"

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

template <typename F>
double ns_per_op(int n, F&& f) {
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) f(i);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

int framing() {
  const std::vector<std::string> pieces = {" the", " quick", " brown", " fox", "\xE2\x80\x94", " jumps", "\n", " \"over\""};
  const int n = 2'000'000;
  std::string out;
  size_t sink = 0;
  const double json_ns = ns_per_op(n, [&](int i) {
    out.clear();
    uma::append_frame(out, uma::encode_token_event("req-123", pieces[i % pieces.size()], 1000 + i % 5000));
    sink += out.size();
  });
  const double newline_ns = ns_per_op(n, [&](int i) {
    out.clear();
    uma::append_escaped(out, pieces[i % pieces.size()]);
    sink += out.size();
  });
  // What HttpServer writes per streamed token: an OpenAI chunk as an SSE event in an HTTP chunk.
  uma::openai::CompletionRequest oai;
  oai.model = "small-q8_0.gguf";
  const double sse_ns = ns_per_op(n / 2, [&](int i) {
    out = "data: ";
    out += uma::openai::chunk(oai, "cmpl-123", 1795286165, pieces[i % pieces.size()], "", false);
    out += "\n\n";
    char size[24];
    const int k = std::snprintf(size, sizeof size, "%zx\r\n", out.size());
    sink += out.size() + static_cast<size_t>(k) + 2;
  });
  std::string frame;
  uma::append_frame(frame, uma::encode_token_event("req-123", " quick", 4321));
  const std::string payload = frame.substr(4);
  uma::WireEvent ev;
  const double parse_ns = ns_per_op(n / 4, [&](int) { sink += uma::parse_event(payload, &ev).ok(); });
  std::printf("server encode, JSON token frame: %.3f us/token (%zu bytes for \" quick\")\n", json_ns / 1000, frame.size());
  std::printf("server encode, newline escape:   %.3f us/token\n", newline_ns / 1000);
  std::printf("JSON framing cost over newline:  %.3f us/token\n", (json_ns - newline_ns) / 1000);
  std::printf("client parse, JSON token frame:  %.3f us/token\n", parse_ns / 1000);
  std::printf("server encode, OpenAI SSE chunk:  %.3f us/token (%.3f us more than the JSON frame)\n", sse_ns / 1000,
              (sse_ns - json_ns) / 1000);
  return sink == 0;  // keep the work observable
}

// The cancel goes out `delay_ms` (uniform in [0, max_delay_ms)) after the third token, so it lands
// at a random point of a tick, not just as a token arrives.
int cancel(const std::string& socket, int runs, double max_delay_ms) {
  std::vector<double> ms;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> delay(0.0, max_delay_ms);
  for (int r = 0; r < runs; ++r) {
    uma::Status st;
    auto c = uma::UmaClient::connect(socket, &st);
    if (!c) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 2;
    }
    uma::WireRequest req;
    req.id = "cancel-" + std::to_string(r);
    req.prompt = "cancel latency probe number " + std::to_string(r);
    if (!c->send_request(req).ok()) return 2;
    uma::WireEvent ev;
    for (int k = 0; k < 3; ++k) {
      if (!c->read_event(&ev, 30000).ok() || ev.kind != uma::WireEvent::Kind::kToken) return 2;
    }
    if (max_delay_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay(rng)));
    const auto t0 = Clock::now();
    if (!c->send_cancel(req.id).ok()) return 2;
    while (c->read_event(&ev, 30000).ok() && ev.kind == uma::WireEvent::Kind::kToken) {
    }
    if (ev.kind != uma::WireEvent::Kind::kEos || ev.reason != "cancelled") {
      std::fprintf(stderr, "run %d ended with %s\n", r, ev.raw.c_str());
      return 1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::printf("cancel (at a random 0-%.0f ms after a token) -> eos over %d runs: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", max_delay_ms, runs, percentile(ms, 0.5),
              percentile(ms, 0.99), *std::max_element(ms.begin(), ms.end()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "framing") return framing();
  if (mode == "cancel" && argc > 2) {
    return cancel(argv[2], argc > 3 ? std::atoi(argv[3]) : 200, argc > 4 ? std::atof(argv[4]) : 0.0);
  }
  std::fprintf(stderr, "usage: uma-protocol-bench framing | cancel SOCKET [RUNS] [MAX_DELAY_MS]\n");
  return 2;
}
