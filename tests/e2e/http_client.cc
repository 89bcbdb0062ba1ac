#include "e2e/http_client.h"

#include <regex>

#include "e2e/json_helpers.h"
#include "httpkit/http_wire.h"

namespace uma::test {

int http_port(const Daemon& d) {
  std::smatch m;
  const std::string log = d.log();
  if (std::regex_search(log, m, std::regex("http listening on [0-9.]+:([0-9]+)"))) return std::stoi(m[1]);
  return -1;
}

std::vector<std::string> http_args(std::vector<std::string> extra) {
  extra.insert(extra.end(), {"--http", "127.0.0.1:0", "--chat-template", "chatml"});
  return args(std::move(extra));
}

std::size_t response_length(const std::string& b) {
  ResponseReader rx;
  rx.feed(b);
  std::string body, error;
  if (!rx.pump(&body, &error)) return b.size();  // garbage: all of it, for the caller to see
  if (rx.done()) return b.size() - rx.buffered();
  if (rx.reads_to_eof()) return b.find("\r\n\r\n") + 4;  // a head with neither length nor chunks
  return std::string::npos;
}

Tcp::Tcp(int port, int rcvbuf) {
  std::string error;
  socket_ = BlockingSocket::tcp("127.0.0.1", port, rcvbuf, &error);
}

Tcp::~Tcp() { close(); }

bool Tcp::send(const std::string& s) {
  // A peer that stops reading without closing cannot block a test forever.
  std::string error;
  return socket_.send_all(s, BlockingClock::now() + kHangGuard, &error);
}

std::string Tcp::read_until(const std::function<bool(const std::string&)>& done, std::chrono::milliseconds timeout) {
  const auto end = BlockingClock::now() + timeout;
  char tmp[4096];
  while (!closed_ && !done(buf_)) {
    std::size_t n = 0;
    std::string error;
    const Read r = socket_.read_some(tmp, sizeof tmp, end, &n, &error);
    if (r == Read::kData) {
      buf_.append(tmp, n);
    } else if (r == Read::kTimeout) {
      break;
    } else {
      closed_ = true;  // EOF, or a reset (the server closed with our bytes unread)
    }
  }
  return buf_;
}

std::string Tcp::response(std::chrono::milliseconds timeout) {
  read_until([](const std::string& b) { return response_length(b) != std::string::npos; }, timeout);
  const std::size_t len = response_length(buf_);
  if (len == std::string::npos) return buf_;
  std::string r = buf_.substr(0, len);
  buf_.erase(0, len);
  return r;
}

bool Tcp::closed_by_peer(std::chrono::milliseconds timeout) {
  read_until([](const std::string&) { return false; }, timeout);
  return closed_;
}

void Tcp::shutdown_write() { socket_.shutdown_write(); }

void Tcp::close() { socket_.close(); }

std::string body_of(const std::string& response) {
  const std::size_t h = response.find("\r\n\r\n");
  return h == std::string::npos ? std::string() : response.substr(h + 4);
}

int status_of(const std::string& response) {
  if (response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return -1;
  try {
    return std::stoi(response.substr(9, 3));
  } catch (...) {
    return -1;
  }
}

std::string head_of(const std::string& response) { return response.substr(0, response.find("\r\n\r\n")); }

std::string dechunk(const std::string& body) {
  ResponseReader rx;
  rx.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body);
  std::string out, error;
  rx.pump(&out, &error);  // what decoded before any error
  return out;
}

std::string post(const std::string& path, const std::string& body, bool keep_alive) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + (keep_alive ? "" : "\r\nConnection: close") + "\r\n\r\n" + body;
}

}  // namespace uma::test
