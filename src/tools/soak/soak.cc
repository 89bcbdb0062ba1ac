#include "tools/soak/soak.h"

#include <llama.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace uma::soak {

std::string_view name(Front f) { return f == Front::kUds ? "uds" : "http"; }

std::string_view name(Action a) {
  switch (a) {
    case Action::kStream: return "stream";
    case Action::kFull: return "full";
    case Action::kCancel: return "cancel";
    case Action::kDisconnect: return "disconnect";
    case Action::kSlow: return "slow_reader";
    case Action::kMalformed: return "malformed";
    case Action::kProbe: return "probe";
  }
  return "?";
}

std::string_view name(Outcome o) {
  switch (o) {
    case Outcome::kExact: return "exact";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kRaced: return "raced";
    case Outcome::kDisconnected: return "disconnected";
    case Outcome::kDropped: return "dropped";
    case Outcome::kTypedError: return "typed_error";
    case Outcome::kProbeOk: return "ok";
    case Outcome::kUnexpected: return "UNEXPECTED";
  }
  return "?";
}

Expected Expectations::completion(const std::string& prompt, int max_tokens) const {
  Expected e;
  std::lock_guard<std::mutex> lock(mu_);
  e.text = oracle_.expected_text(prompt, max_tokens);
  const std::size_t pieces = oracle_.expected_pieces(prompt, max_tokens).size();
  e.completion_tokens = static_cast<int>(pieces);
  e.reason = pieces < static_cast<std::size_t>(max_tokens) ? "stop" : "length";
  e.prompt_tokens = static_cast<int>(oracle_.tokenize(prompt).size());
  return e;
}

std::string Expectations::render_chat(const std::string& system, const std::string& user) {
  const llama_chat_message msgs[2] = {{"system", system.c_str()}, {"user", user.c_str()}};
  std::string out(4096 + system.size() + user.size(), '\0');
  const int n = llama_chat_apply_template("chatml", msgs, 2, /*add_ass=*/true, out.data(), static_cast<int>(out.size()));
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

void Tally::record(Front f, Action a, Outcome o, std::int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  counts_[static_cast<std::size_t>(f)][static_cast<std::size_t>(a)][static_cast<std::size_t>(o)]++;
  tokens_ += tokens;
}

void Tally::unexpected(Front f, Action a, const std::string& request, const std::string& detail) {
  if (detail.find("text differs") != std::string::npos) mismatches_++;  // diff()'s words
  std::lock_guard<std::mutex> lock(mu_);
  counts_[static_cast<std::size_t>(f)][static_cast<std::size_t>(a)][static_cast<std::size_t>(Outcome::kUnexpected)]++;
  if (first_.size() < kKeep) {
    first_.push_back("[" + std::string(name(f)) + " " + std::string(name(a)) + " " + request + "] " + detail);
  }
}

std::int64_t Tally::count(Front f, Action a, Outcome o) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_[static_cast<std::size_t>(f)][static_cast<std::size_t>(a)][static_cast<std::size_t>(o)];
}

std::int64_t Tally::total(Outcome o) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::int64_t n = 0;
  for (const auto& by_action : counts_) {
    for (const auto& by_outcome : by_action) n += by_outcome[static_cast<std::size_t>(o)];
  }
  return n;
}

std::int64_t Tally::total_requests() const {
  std::int64_t n = 0;
  for (std::size_t o = 0; o < kOutcomes; ++o) n += total(static_cast<Outcome>(o));
  return n;
}

std::vector<std::string> Tally::first_unexpected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_;
}

std::string quote(std::string_view s, std::size_t max) {
  const bool cut = s.size() > max;
  // Replace invalid UTF-8 so the message itself can always be printed as JSON.
  std::string q = nlohmann::json(std::string(s.substr(0, max))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return cut ? q + "..." : q;
}

std::string diff(const std::string& want, const std::string& got) {
  if (want == got) return "";
  const std::size_t at = static_cast<std::size_t>(
      std::mismatch(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(std::min(want.size(), got.size())), got.begin())
          .first -
      want.begin());
  const std::size_t from = at > 20 ? at - 20 : 0;
  return "text differs at byte " + std::to_string(at) + " (want " + std::to_string(want.size()) + " bytes, got " +
         std::to_string(got.size()) + "): want ..." + quote(std::string_view(want).substr(from), 60) + " got ..." +
         quote(std::string_view(got).substr(from), 60);
}

}  // namespace uma::soak
