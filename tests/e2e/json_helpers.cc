#include "e2e/json_helpers.h"

#include <thread>

#include <gtest/gtest.h>

namespace uma::test {

std::unique_ptr<UmaClient> connect(const Daemon& d) {
  Status st;
  auto c = UmaClient::connect(d.socket(), &st);
  EXPECT_TRUE(c != nullptr) << st.to_string();
  return c;
}

WireRequest request(const std::string& id, const std::string& prompt, int max_tokens) {
  WireRequest r;
  r.id = id;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  return r;
}

Reply read_reply(UmaClient& c, bool check_close) {
  Reply r;
  WireEvent ev;
  while (c.read_event(&ev, kHangGuardMs).ok()) {
    if (ev.kind == WireEvent::Kind::kToken) {
      r.text += ev.text;
      ++r.tokens;
      r.token_ids.push_back(ev.token_id);
      r.logprobs.insert(r.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      continue;
    }
    r.logprobs.insert(r.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    r.end = ev;
    break;
  }
  if (check_close) r.closed_after = !c.read_event(&ev, 5000).ok();
  return r;
}

nlohmann::json metrics(const Daemon& d) { return nlohmann::json::parse(fetch_metrics_json(d.socket())); }

nlohmann::json wait_metrics_json(const Daemon& d, const std::function<bool(const nlohmann::json&)>& pred,
                                 std::chrono::milliseconds timeout) {
  nlohmann::json m;
  for (auto deadline = std::chrono::steady_clock::now() + timeout;;) {
    m = metrics(d);
    if (pred(m) || std::chrono::steady_clock::now() >= deadline) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll interval, not a synchronisation
  }
}

std::vector<std::string> args(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--protocol", "json"});
  return extra;
}

}  // namespace uma::test
