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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-cli: stream completions from umad over its Unix socket"};
  uma::WireRequest req;
  std::string prompt;
  const char* env_sock = std::getenv("UMA_SOCK");
  std::string socket_path = env_sock ? env_sock : "/tmp/uma.sock";
  int max_tokens = 0;
  bool no_stream = false, raw_json = false, prometheus = false;
  double slo_ttft = 0, slo_tbt = 0;
  req.id = "cli-" + std::to_string(::getpid());

  app.add_option("prompt", prompt, "prompt text, or 'metrics'; read from stdin when absent");
  app.add_option("-s,--socket", socket_path, "umad socket (env UMA_SOCK)")->capture_default_str();
  app.add_option("--id", req.id, "request id")->capture_default_str();
  app.add_option("-n,--max-tokens", max_tokens, "tokens to generate at most (default: the server's)");
  app.add_option("--temperature", req.sampling.temperature, "0 = greedy");
  app.add_option("--top-p", req.sampling.top_p);
  app.add_option("--top-k", req.sampling.top_k);
  app.add_option("--min-p", req.sampling.min_p);
  app.add_option("--repeat-penalty", req.sampling.repeat_penalty);
  app.add_option("--frequency-penalty", req.sampling.frequency_penalty);
  app.add_option("--presence-penalty", req.sampling.presence_penalty);
  app.add_option("--seed", req.sampling.seed);
  app.add_option("--stop", req.stop, "stop string (repeatable)");
  app.add_flag("--no-stream", no_stream, "one final event with the whole text");
  app.add_option("--slo-ttft-ms", slo_ttft, "time-to-first-token target for this request");
  app.add_option("--slo-tbt-ms", slo_tbt, "inter-token target for this request");
  app.add_option("--metadata", req.metadata_json, "JSON object echoed back in eos");
  app.add_flag("--background", req.background, "request class background (default interactive): served after "
               "interactive work and may be paused for it");
  app.add_option("--tenant", req.tenant, "metadata.tenant: the key of the daemon's per-tenant cap");
  std::string schema_file, grammar_file;
  app.add_option("--json-schema", schema_file, "file with a JSON schema the output must match (structured output)")
      ->check(CLI::ExistingFile);
  app.add_option("--grammar", grammar_file, "file with a GBNF grammar (root rule `root`) the output must match")
      ->check(CLI::ExistingFile)->excludes("--json-schema");
  std::int32_t logprobs = -1;
  app.add_option("--logprobs", logprobs, "print each token's log-probability and this many alternatives (0..20) to stderr")
      ->check(CLI::Range(0, 20));
  app.add_flag("--json", raw_json, "print the raw events, one JSON object per line");
  app.add_flag("--prometheus", prometheus, "with 'metrics': Prometheus text exposition instead of JSON");
  CLI11_PARSE(app, argc, argv);

  const auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  if (!schema_file.empty()) req.json_schema = slurp(schema_file);  // sent as the JSON object it holds
  if (!grammar_file.empty()) req.sampling.grammar = slurp(grammar_file);
  req.sampling.logprobs = logprobs;
  const bool metrics = prompt == "metrics";
  if (prompt.empty()) {
    prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    while (!prompt.empty() && (prompt.back() == '\n' || prompt.back() == '\r')) prompt.pop_back();
  }
  uma::Status st;
  std::unique_ptr<uma::UmaClient> client = uma::UmaClient::connect(socket_path, &st);
  if (!client) {
    std::cerr << "uma-cli: " << st.message() << "\n";
    return 2;
  }
  if (metrics) {
    st = client->send_metrics_request(prometheus);
  } else {
    req.prompt = prompt;
    if (max_tokens > 0) req.max_tokens = max_tokens;
    req.stream = !no_stream;
    req.slo_ttft_ms = slo_ttft;
    req.slo_tbt_ms = slo_tbt;
    uma::append_frame(g_cancel_frame, uma::encode_cancel(req.id));
    g_fd = client->fd();
    std::signal(SIGINT, on_sigint);
    st = client->send_request(req);
  }
  if (!st.ok()) {
    std::cerr << "uma-cli: " << st.message() << "\n";
    return 2;
  }
  // --logprobs: one line per token on stderr: its logprob, its text (escaped) and the alternatives.
  const auto print_logprobs = [](const uma::WireEvent& e) {
    const auto quoted = [](const std::string& t) { return uma::to_json_text(nlohmann::json(t)); };
    for (const uma::LogprobEntry& x : e.logprobs) {
      std::cerr << std::fixed << std::setprecision(4) << x.chosen.logprob << " " << quoted(x.chosen.text);
      for (const uma::TokenLogprob& t : x.top) std::cerr << "  " << quoted(t.text) << " " << t.logprob;
      std::cerr << "\n";
    }
  };
  uma::WireEvent ev;
  while ((st = client->read_event(&ev)).ok()) {
    if (!raw_json) print_logprobs(ev);
    if (ev.kind == uma::WireEvent::Kind::kMetrics && prometheus && !raw_json) {
      std::cout << ev.text << std::flush;
      return 0;
    }
    if (raw_json || ev.kind == uma::WireEvent::Kind::kMetrics) std::cout << ev.raw << "\n" << std::flush;
    switch (ev.kind) {
      case uma::WireEvent::Kind::kToken:
        if (!raw_json) std::cout << ev.text << std::flush;
        break;
      case uma::WireEvent::Kind::kEos:
        if (!raw_json) std::cout << ev.text << "\n";
        return ev.reason == "cancelled" ? 130 : 0;
      case uma::WireEvent::Kind::kError:
        if (!raw_json) std::cout << "\n";
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
