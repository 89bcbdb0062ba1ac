// uma-cli: umad's command-line client (framed JSON protocol).
//   uma-cli "prompt"            stream the completion to stdout
//   uma-cli < prompt.txt        prompt from stdin
//   uma-cli metrics             print the metrics snapshot (--prometheus: text exposition)
// Every request field has a flag; --json prints the raw events. Ctrl-C sends a cancel and exits
// after the server's eos (a second Ctrl-C exits at once). Errors go to stderr: exit 1 for an
// error event, 2 for usage or connection problems, 130 after a cancel.
#include <CLI/CLI.hpp>
#include <sys/socket.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "client/uma_client.h"
#include "common/json_text.h"
#include "ipc/frame_codec.h"

namespace {

// Set before the request goes out; the SIGINT handler only calls send(), which is signal-safe.
int g_fd = -1;
std::string g_cancel_frame;
volatile std::sig_atomic_t g_cancelled = 0;

void on_sigint(int) {
  if (g_cancelled) std::_Exit(130);
  g_cancelled = 1;
  if (g_fd >= 0) (void)::send(g_fd, g_cancel_frame.data(), g_cancel_frame.size(), MSG_NOSIGNAL);
}

// The flags as given.
struct CliFlags {
  uma::WireRequest req;
  std::string prompt, socket_path, schema_file, grammar_file;
  int max_tokens = 0;
  bool no_stream = false, raw_json = false, prometheus = false;
  double slo_ttft = 0, slo_tbt = 0;
  std::int32_t logprobs = -1;
};

void add_flags(CLI::App& app, CliFlags& f) {
  app.add_option("prompt", f.prompt, "prompt text, or 'metrics'; read from stdin when absent");
  app.add_option("-s,--socket", f.socket_path, "umad socket (env UMA_SOCK)")->capture_default_str();
  app.add_option("--id", f.req.id, "request id")->capture_default_str();
  app.add_option("-n,--max-tokens", f.max_tokens, "tokens to generate at most (default: the server's)");
  app.add_option("--temperature", f.req.sampling.temperature, "0 = greedy");
  app.add_option("--top-p", f.req.sampling.top_p);
  app.add_option("--top-k", f.req.sampling.top_k);
  app.add_option("--min-p", f.req.sampling.min_p);
  app.add_option("--repeat-penalty", f.req.sampling.repeat_penalty);
  app.add_option("--frequency-penalty", f.req.sampling.frequency_penalty);
  app.add_option("--presence-penalty", f.req.sampling.presence_penalty);
  app.add_option("--seed", f.req.sampling.seed);
  app.add_option("--stop", f.req.stop, "stop string (repeatable)");
  app.add_flag("--no-stream", f.no_stream, "one final event with the whole text");
  app.add_option("--slo-ttft-ms", f.slo_ttft, "time-to-first-token target for this request");
  app.add_option("--slo-tbt-ms", f.slo_tbt, "inter-token target for this request");
  app.add_option("--metadata", f.req.metadata_json, "JSON object echoed back in eos");
  app.add_flag("--background", f.req.background, "request class background (default interactive): served after "
               "interactive work and may be paused for it");
  app.add_option("--tenant", f.req.tenant, "metadata.tenant: the key of the daemon's per-tenant cap");
  app.add_option("--json-schema", f.schema_file, "file with a JSON schema the output must match (structured output)")
      ->check(CLI::ExistingFile);
  app.add_option("--grammar", f.grammar_file, "file with a GBNF grammar (root rule `root`) the output must match")
      ->check(CLI::ExistingFile)->excludes("--json-schema");
  app.add_option("--logprobs", f.logprobs, "print each token's log-probability and this many alternatives (0..20) to stderr")
      ->check(CLI::Range(0, 20));
  app.add_flag("--json", f.raw_json, "print the raw events, one JSON object per line");
  app.add_flag("--prometheus", f.prometheus, "with 'metrics': Prometheus text exposition instead of JSON");
}

// --logprobs: one line per token on stderr: its logprob, its text (escaped) and the alternatives.
void print_logprobs(const uma::WireEvent& e) {
  const auto quoted = [](const std::string& t) { return uma::to_json_text(nlohmann::json(t)); };
  for (const uma::LogprobEntry& x : e.logprobs) {
    std::cerr << std::fixed << std::setprecision(4) << x.chosen.logprob << " " << quoted(x.chosen.text);
    for (const uma::TokenLogprob& t : x.top) std::cerr << "  " << quoted(t.text) << " " << t.logprob;
    std::cerr << "\n";
  }
}

// Prints the reply's events until its end; the exit code.
int print_events(uma::UmaClient& client, const CliFlags& f) {
  uma::Status st;
  uma::WireEvent ev;
  while ((st = client.read_event(&ev)).ok()) {
    if (!f.raw_json) print_logprobs(ev);
    if (ev.kind == uma::WireEvent::Kind::kMetrics && f.prometheus && !f.raw_json) {
      std::cout << ev.text << std::flush;
      return 0;
    }
    if (f.raw_json || ev.kind == uma::WireEvent::Kind::kMetrics) std::cout << ev.raw << "\n" << std::flush;
    switch (ev.kind) {
      case uma::WireEvent::Kind::kToken:
        if (!f.raw_json) std::cout << ev.text << std::flush;
        break;
      case uma::WireEvent::Kind::kEos:
        if (!f.raw_json) std::cout << ev.text << "\n";
        return ev.reason == "cancelled" ? 130 : 0;
      case uma::WireEvent::Kind::kError:
        if (!f.raw_json) std::cout << "\n";
        std::cerr << "uma-cli: " << ev.code << ": " << ev.message << "\n";
        return 1;
      case uma::WireEvent::Kind::kMetrics:
        return 0;
      case uma::WireEvent::Kind::kUnknown:
        break;
    }
  }
  std::cerr << "uma-cli: " << st.message() << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-cli: stream completions from umad over its Unix socket"};
  CliFlags f;
  const char* env_sock = std::getenv("UMA_SOCK");
  f.socket_path = env_sock ? env_sock : "/tmp/uma.sock";
  f.req.id = "cli-" + std::to_string(::getpid());
  add_flags(app, f);
  CLI11_PARSE(app, argc, argv);

  uma::WireRequest& req = f.req;
  const auto slurp = [](const std::string& path) {
    std::ifstream file(path);
    return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  };
  if (!f.schema_file.empty()) req.json_schema = slurp(f.schema_file);  // sent as the JSON object it holds
  if (!f.grammar_file.empty()) req.sampling.grammar = slurp(f.grammar_file);
  req.sampling.logprobs = f.logprobs;
  std::string& prompt = f.prompt;
  const bool metrics = prompt == "metrics";
  if (prompt.empty()) {
    prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    while (!prompt.empty() && (prompt.back() == '\n' || prompt.back() == '\r')) prompt.pop_back();
  }
  uma::Status st;
  std::unique_ptr<uma::UmaClient> client = uma::UmaClient::connect(f.socket_path, &st);
  if (!client) {
    std::cerr << "uma-cli: " << st.message() << "\n";
    return 2;
  }
  if (metrics) {
    st = client->send_metrics_request(f.prometheus);
  } else {
    req.prompt = prompt;
    if (f.max_tokens > 0) req.max_tokens = f.max_tokens;
    req.stream = !f.no_stream;
    req.slo_ttft_ms = f.slo_ttft;
    req.slo_tbt_ms = f.slo_tbt;
    uma::append_frame(g_cancel_frame, uma::encode_cancel(req.id));
    g_fd = client->fd();
    std::signal(SIGINT, on_sigint);
    st = client->send_request(req);
  }
  if (!st.ok()) {
    std::cerr << "uma-cli: " << st.message() << "\n";
    return 2;
  }
  return print_events(*client, f);
}
