#include "e2e/held_stream.h"

#include <nlohmann/json.hpp>

#include <chrono>

#include "e2e/daemon_harness.h"
#include "e2e/oracle.h"
#include "httpkit/http_wire.h"

namespace uma::test {

HeldStream::HeldStream(int port, const std::string& model, const std::string& prompt, const std::string& key, int n)
    : prompt_(prompt), n_(n) {
  EXPECT_EQ(oracle().expected_pieces(prompt, n).size(), static_cast<std::size_t>(n)) << "the oracle's continuation of '" << prompt << "' ends early";
  nlohmann::json body = {{"prompt", prompt}, {"max_tokens", n}, {"stream", true}};
  if (!model.empty()) body["model"] = model;
  std::string error;
  socket_ = BlockingSocket::tcp("127.0.0.1", port, 0, &error);
  const std::string text = body.dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                              (key.empty() ? "" : "Authorization: Bearer " + key + "\r\n") +
                              "Content-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
  if (socket_.valid() && socket_.send_all(request, BlockingClock::now() + kHangGuard, &error)) {
    reader_ = std::thread([this] { read(); });
  } else {
    ended_ = true;
  }
}

HeldStream::~HeldStream() { close(); }

void HeldStream::close() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  socket_.close();
}

::testing::AssertionResult HeldStream::exact() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string want = oracle().expected_text(prompt_, n_);
  if (error_.empty() && !text_.empty() && (ended_ ? text_ == want : want.compare(0, text_.size(), text_) == 0)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "the stream of '" << prompt_ << "' (" << tokens_.load() << " events, " << (ended_ ? "ended" : "held")
                                       << ") is not the oracle's: " << (error_.empty() ? text_.substr(0, 300) : error_);
}

void HeldStream::read() {
  ResponseReader rx;
  SseSplitter sse;
  char buf[16384];
  while (!stop_) {
    std::size_t n = 0;
    std::string error, body, data;
    // The read's deadline is how soon close() is seen (the loop goes on), not a wait for an event.
    const Read r = socket_.read_some(buf, sizeof buf, BlockingClock::now() + std::chrono::milliseconds(50), &n, &error);
    if (r == Read::kTimeout) continue;
    if (r != Read::kData) break;
    rx.feed({buf, n});
    const bool parsed = rx.pump(&body, &error);
    sse.feed(body);
    std::lock_guard<std::mutex> lock(mu_);
    if (!parsed || (rx.head_done() && rx.status() != 200)) {
      error_ = parsed ? "HTTP " + std::to_string(rx.status()) + " " + body : error;
      break;
    }
    while (sse.next(&data)) {
      const nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
      if (j.is_object() && j.contains("error")) error_ = data;
      if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) continue;
      text_ += j["choices"][0].value("text", "");
      ++tokens_;
    }
    if (rx.done()) break;
  }
  ended_ = !stop_;
}

}  // namespace uma::test
