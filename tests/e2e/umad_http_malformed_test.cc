// Malformed HTTP, table-driven: every row sends raw bytes to one umad (oracle model) and states
// what a well-behaved server answers: a status (4xx/5xx with OpenAI's error shape, as valid JSON),
// or a clean close. After every row, on a fresh connection, an exact oracle completion must
// succeed and the daemon must be alive with no crash in its log. Every failing row is reported by
// name; a daemon that died is restarted so the rows after it are still judged.
//
// Where Boost.Beast's parser decides the outcome (HTTP-level errors), it reports a bad start line
// or field as soon as it reaches the offending byte, and umad answers 400 (`malformed HTTP
// request: ...`) and closes; a message that is merely incomplete waits for the rest until
// --http-timeout-sec, then the connection closes without a reply. Both count as a clean close in
// the rows that send no proper request; the comments at the rows say where the RFCs allow either.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/oracle.h"
#include "e2e/umad_http_malformed.h"
#include "llama.h"

namespace uma::test {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;
using json = nlohmann::json;
using namespace malformed;


std::string printable(const std::string& s, std::size_t max = 400) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && out.size() < max; ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch == '\r') out += "\\r";
    else if (ch == '\n') out += "\\n";
    else if (ch < 0x20 || ch >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (out.size() >= max) out += "...";
  return out;
}

// The completion text a 200 carries: a JSON completion or chat completion, or an SSE stream of
// either (which must end with [DONE]).
bool completion_text(const std::string& response, std::string* text, std::string* err) {
  text->clear();
  const std::string head = head_of(response);
  try {
    if (head.find("text/event-stream") == std::string::npos) {
      const json j = json::parse(body_of(response));
      const json& c = j.at("choices").at(0);
      *text = c.contains("message") ? c["message"].at("content").get<std::string>() : c.at("text").get<std::string>();
      return true;
    }
    const std::string events = dechunk(body_of(response));
    bool done = false;
    std::size_t pos = 0;
    while (pos < events.size()) {
      std::size_t end = events.find("\n\n", pos);
      if (end == std::string::npos) end = events.size();
      const std::string ev = events.substr(pos, end - pos);
      pos = end + 2;
      if (ev.rfind("data: ", 0) != 0) continue;
      const std::string data = ev.substr(6);
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      const json j = json::parse(data);
      if (j.contains("error")) {
        *err = "an error event: " + data;
        return false;
      }
      if (j.at("choices").empty()) continue;  // the usage chunk
      const json& c = j["choices"][0];
      if (c.contains("delta")) {
        if (c["delta"].contains("content")) *text += c["delta"]["content"].get<std::string>();
      } else {
        *text += c.at("text").get<std::string>();
      }
    }
    if (!done) *err = "the stream has no [DONE]";
    return done;
  } catch (const std::exception& e) {
    *err = std::string("not a completion: ") + e.what();
    return false;
  }
}

// OpenAI's error shape: {"error":{"message":string,"type":string,"param":...,"code":...}}; on
// Ollama's /api/ paths, Ollama's: {"error": string}.
bool error_shape(const std::string& body, std::string* err) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) {
    *err = "the error body is not valid JSON";
    return false;
  }
  if (j.is_object() && j.size() == 1 && j.contains("error") && j["error"].is_string() && !j["error"].get<std::string>().empty()) {
    return true;
  }
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) {
    *err = "no \"error\" object";
    return false;
  }
  const json& e = j["error"];
  if (!e.contains("message") || !e["message"].is_string() || !e.contains("type") || !e["type"].is_string() ||
      !e.contains("param") || !e.contains("code")) {
    *err = "the error object lacks message/type/param/code";
    return false;
  }
  return true;
}

// Runs one row on a fresh connection; returns what went wrong (empty: the row passed). Every wait
// ends on the server's answer or close (the hang guard at most).
std::vector<std::string> run_row(int port, const Row& row) {
  std::vector<std::string> fails;
  Tcp t(port);
  if (!t.connected()) return {"cannot connect"};
  for (const std::string& piece : row.pieces) {
    if (!t.send(piece)) break;  // the server may close (or reset) before it has read everything
  }
  if (row.after == After::kClose) return fails;  // nothing more to see on this connection
  if (row.after == After::kHalfClose) t.shutdown_write();
  // The replies are read first and judged after: an idle keep-alive connection closes after
  // --http-timeout-sec (1 s), so the GET that shows it still in sync goes out at once.
  std::vector<std::string> got;
  for (std::size_t i = 0; i < row.replies.size(); ++i) {
    std::string r = t.response();
    // Interim responses (100 Continue) precede the final one.
    while (status_of(r) >= 100 && status_of(r) < 200 && response_length(r) != std::string::npos) r = t.response();
    if (r.empty() || response_length(r) == std::string::npos) {
      if (row.replies[i].optional && t.closed() && r.empty()) break;  // a clean close instead of this reply
      fails.push_back("reply " + std::to_string(i + 1) + ": " + (t.closed() ? "the server closed" : "timed out") +
                      " without a whole response; got '" + printable(r) + "'");
      return fails;
    }
    got.push_back(std::move(r));
  }
  const bool in_sync = row.end == End::kOpen && !t.closed() && t.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string health = in_sync ? t.response() : std::string();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Expected& want = row.replies[i];
    const std::string& r = got[i];
    const std::string tag = "reply " + std::to_string(i + 1) + ": ";
    const int st = status_of(r);
    if (!want.status.count(st)) {
      std::string wanted;
      for (int s : want.status) wanted += (wanted.empty() ? "" : "|") + std::to_string(s);
      fails.push_back(tag + "status " + std::to_string(st) + ", want " + wanted + ": '" + printable(r) + "'");
      continue;
    }
    std::string err;
    if (st >= 400 && !error_shape(body_of(r), &err)) fails.push_back(tag + err + ": '" + printable(r) + "'");
    if (st == 200 && !want.text.empty()) {
      std::string text;
      if (!completion_text(r, &text, &err)) {
        fails.push_back(tag + err + ": '" + printable(r) + "'");
      } else if (text != want.text) {
        fails.push_back(tag + "text '" + printable(text) + "', want '" + printable(want.text) + "'");
      }
    }
    if (!want.contains.empty()) {
      const std::string body = head_of(r).find("chunked") != std::string::npos ? dechunk(body_of(r)) : body_of(r);
      if (body.find(want.contains) == std::string::npos) fails.push_back(tag + "no '" + want.contains + "' in the body");
    }
  }
  switch (row.end) {
    case End::kOpen:
      if (!in_sync) {
        fails.push_back("the connection was closed; it should stay open");
      } else if (status_of(health) != 200 || response_length(health) == std::string::npos) {
        fails.push_back("a GET /health on the same connection got '" + printable(health) + "', want 200");
      }
      break;
    case End::kClosed:
      if (!t.closed_by_peer(kHangGuard)) fails.push_back("the server did not close the connection");
      if (!t.buffered().empty()) fails.push_back("unexpected bytes before the close: '" + printable(t.buffered()) + "'");
      break;
    case End::kAny:
      break;
  }
  return fails;
}

bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const auto p = stat.rfind(')');
  return p != std::string::npos && p + 2 < stat.size() && stat[p + 2] != 'Z' && stat[p + 2] != 'X';
}

// A fresh connection's exact oracle completion; "" if it is right, else what was wrong.
std::string oracle_check(int port, const std::string& expected) {
  Tcp t(port);
  if (!t.connected()) return "cannot connect";
  if (!t.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":8,"temperature":0})", false))) {
    return "cannot send";
  }
  const std::string r = t.response();
  std::string text, err;
  if (status_of(r) != 200) return "status " + std::to_string(status_of(r)) + ": '" + printable(r) + "'";
  if (!completion_text(r, &text, &err)) return err;
  if (text != expected) return "text '" + printable(text) + "', want '" + printable(expected) + "'";
  return {};
}

// What a crash leaves in the log.
std::string crash_in(const std::string& log) {
  for (const char* sign : {"terminate called", "ABORT", "Assertion", "AddressSanitizer", "runtime error:",
                           "Segmentation fault", "what():"}) {
    if (const auto at = log.find(sign); at != std::string::npos) return log.substr(at, 300);
  }
  return {};
}

TEST(UmadHttpMalformed, EveryRowGetsItsStatusOrACleanCloseAndTheOracleStillAnswers) {
  // One compute thread: the oracle model needs no more, and two threads that wait for each other
  // slow every decode many times over when other work shares this machine's cores.
  const std::vector<std::string> daemon_args = http_args(
      {"--threads", "1", "--http-max-body-kib", std::to_string(kMaxBodyKib), "--http-timeout-sec",
       std::to_string(kTimeoutSec), "--max-tokens", std::to_string(kMaxTokens), "--n-ctx", std::to_string(kNCtx),
       "--max-prompt-bytes", std::to_string(kMaxPromptBytes)});
  auto d = std::make_unique<Daemon>(daemon_args);
  ASSERT_TRUE(d->started()) << d->log();
  int port = http_port(*d);
  ASSERT_GT(port, 0) << d->log();
  const std::string hw8 = oracle().expected_text("hello world", 8);
  ASSERT_EQ(oracle_check(port, hw8), "") << "before the table";

  const std::vector<Row> rows = table();
  EXPECT_GE(rows.size(), 50u);
  std::vector<std::string> summary;
  int failed = 0;
  std::size_t log_seen = 0;
  for (const Row& row : rows) {
    SCOPED_TRACE("row '" + row.name + "'");
    const auto t0 = TestClock::now();
    std::vector<std::string> fails = run_row(port, row);
    const bool up = alive(d->pid());
    const std::string log = d->log();
    const std::string crash = crash_in(log.substr(std::min(log_seen, log.size())));
    log_seen = log.size();
    if (!up) {
      const std::string tail = log.substr(log.size() > 600 ? log.size() - 600 : 0);
      fails.push_back("the daemon died: '" + printable(crash.empty() ? tail : crash, 600) + "'");
    } else if (!crash.empty()) {
      fails.push_back("a crash in the log: '" + printable(crash) + "'");
    }
    const std::string oracle_err = up ? oracle_check(port, hw8) : "daemon dead";
    if (!oracle_err.empty() && up) fails.push_back("the oracle completion after it: " + oracle_err);
    for (const std::string& f : fails) ADD_FAILURE() << f;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(TestClock::now() - t0).count();  // printed only
    summary.push_back((fails.empty() ? "PASS  " : "FAIL  ") + row.name + "  (" + std::to_string(ms) + " ms)");
    if (!fails.empty()) ++failed;
    if (!up || !oracle_err.empty()) {  // a fresh daemon, so the next rows are judged on their own
      d = std::make_unique<Daemon>(daemon_args);
      ASSERT_TRUE(d->started()) << d->log();
      port = http_port(*d);
      log_seen = 0;
      ASSERT_EQ(oracle_check(port, hw8), "") << "after a restart";
    }
  }
  std::ostringstream out;
  out << rows.size() << " rows, " << failed << " failed\n";
  for (const std::string& s : summary) out << "  " << s << "\n";
  std::cout << out.str();
}

}  // namespace
}  // namespace uma::test
