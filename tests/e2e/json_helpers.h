// Helpers for end-to-end tests over the framed JSON protocol (umad_json_test, umad_sched_test).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/uma_client.h"
#include "e2e/daemon_harness.h"

namespace uma::test {

std::unique_ptr<UmaClient> connect(const Daemon& d);
WireRequest request(const std::string& id, const std::string& prompt, int max_tokens);

struct Reply {
  std::string text;
  int tokens = 0;
  std::vector<std::int32_t> token_ids;  // of the token events
  std::vector<LogprobEntry> logprobs;   // of every event, in order
  WireEvent end;  // the eos or error
  bool closed_after = false;
};
// Reads token events up to the eos or error (the hang guard at most per event); then, when check_close,
// whether the server closed the connection.
Reply read_reply(UmaClient& c, bool check_close = true);
nlohmann::json metrics(const Daemon& d);
// Polls metrics() until `pred` holds or `timeout` passes; returns the last snapshot read.
nlohmann::json wait_metrics_json(const Daemon& d, const std::function<bool(const nlohmann::json&)>& pred,
                                 std::chrono::milliseconds timeout = kHangGuard);
// Daemon arguments with --protocol json in front.
std::vector<std::string> args(std::vector<std::string> extra);

}  // namespace uma::test
