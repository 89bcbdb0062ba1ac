// A completion stream the test holds open: sent to an OpenAI-compatible /v1/completions (umad, an
// agent's model or a gateway) with "stream": true, read on a thread of its own as it comes, until
// its server ends it or the test closes it (the client goes: its request ends where it runs).
// Whatever must be in use while something else happens is held by the test, never by a stream's
// speed: a stream far longer than any step of the test, ended by the test.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "net/blocking_socket.h"

namespace uma::test {

// A held stream's length: far longer than any step of a test (the server's context must hold it).
inline constexpr int kHeldStreamTokens = 20000;

class HeldStream {
 public:
  // `model` "" sends none; `key` "" no Authorization. The oracle's continuation of `prompt` must be
  // `n` tokens long (checked).
  HeldStream(int port, const std::string& model, const std::string& prompt, const std::string& key = "", int n = kHeldStreamTokens);
  ~HeldStream();
  HeldStream(const HeldStream&) = delete;
  HeldStream& operator=(const HeldStream&) = delete;
  std::size_t tokens() const { return tokens_; }
  bool ended() const { return ended_; }  // by its server (or it never went out)
  void close();
  // What came is the oracle's continuation so far (all of it once the server ended it).
  ::testing::AssertionResult exact() const;

 private:
  void read();
  std::string prompt_;
  int n_;
  BlockingSocket socket_;
  std::thread reader_;
  mutable std::mutex mu_;
  std::string text_, error_;
  std::atomic<std::size_t> tokens_{0};
  std::atomic<bool> stop_{false}, ended_{false};
};

}  // namespace uma::test
