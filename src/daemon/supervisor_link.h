// SupervisorLink: a supervised umad's side of its link to uma-agent (--status-fd N; the agent's
// side is agent/model_process.h). One JSON object per line on the inherited descriptor:
//   {"event":"ready","http_port":P,"socket":"..."}   serving from now on
//   {"event":"busy"} / {"event":"idle"}             the first request started / the last one ended
//   {"event":"stopping","why":"..."}                 on the way out (idle at SIGUSR1, or a signal)
// The agent keeps its models' last-used times and in-use state from these, so it never unloads
// a model with a request in flight: the stop on SIGUSR1 is decided here, on the I/O thread that
// admits requests, so no request can slip in between the check and the stop.
//
// Threading: I/O thread only. Writes never block (the descriptor is made non-blocking); a line the
// pipe cannot take (the agent stopped reading) is dropped: the agent treats a closed pipe as exit.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace uma {

class SupervisorLink {
 public:
  explicit SupervisorLink(int fd) : fd_(fd) {
    if (fd_ >= 0) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~SupervisorLink() {
    if (fd_ >= 0) ::close(fd_);
  }
  SupervisorLink(const SupervisorLink&) = delete;
  SupervisorLink& operator=(const SupervisorLink&) = delete;

  bool attached() const { return fd_ >= 0; }
  void ready(std::uint16_t http_port, const std::string& socket) {
    line("{\"event\":\"ready\",\"http_port\":" + std::to_string(http_port) + ",\"socket\":\"" + escape(socket) + "\"}");
  }
  void in_use(std::int32_t n) {
    const bool busy = n > 0;
    if (busy == busy_) return;
    busy_ = busy;
    line(busy ? "{\"event\":\"busy\"}" : "{\"event\":\"idle\"}");
  }
  bool busy() const { return busy_; }
  void stopping(const std::string& why) { line("{\"event\":\"stopping\",\"why\":\"" + escape(why) + "\"}"); }
  void refused_stop() { line("{\"event\":\"busy\"}"); }

 private:
  static std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out;
  }
  void line(std::string text) {
    if (fd_ < 0) return;
    text += '\n';
    // At most a few dozen bytes at once: one write, atomic on a pipe (PIPE_BUF).
    [[maybe_unused]] const ssize_t n = ::write(fd_, text.data(), text.size());
  }
  int fd_;
  bool busy_ = false;
};

}  // namespace uma
