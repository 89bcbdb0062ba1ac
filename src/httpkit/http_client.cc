#include "httpkit/http_client.h"
#include "httpkit/http_wire.h"

#include <utility>

namespace uma {

void ResponseStream::reset() {
  rx_.reset();
  body_.clear();
  sse_ = SseSplitter();
  got_bytes_ = false;
}

bool ResponseStream::take(std::string* error, bool* progress) {
  const bool head = rx_.head_done(), done = rx_.done();
  std::string bytes;
  if (!rx_.pump(&bytes, error)) return false;
  body_ += bytes;
  sse_.feed(bytes);
  *progress = !bytes.empty() || head != rx_.head_done() || done != rx_.done();
  return true;
}

Read ResponseStream::pump(Clock::time_point deadline, std::string* error) {
  // Whatever is buffered first (a pipelined response's bytes, or the tail of the last read).
  bool progress = false;
  if (!take(error, &progress)) return Read::kError;
  if (progress || rx_.done()) return Read::kData;
  if (eof_) return Read::kEof;
  if (!pacer_.before_read()) return Read::kStopped;
  std::string buf(pacer_.chunk(), '\0');
  std::size_t n = 0;
  const Read r = s_.read_some(buf.data(), buf.size(), deadline, &n, error);
  if (r == Read::kEof) {
    eof_ = true;
    rx_.eof();  // ends a body delimited by the close; else it stays partial
    return take(error, &progress) ? Read::kData : Read::kError;  // the caller looks at what is complete
  }
  if (r != Read::kData) return r;
  pacer_.after_read(n);
  got_bytes_ = true;
  rx_.feed(std::string_view(buf.data(), n));
  return take(error, &progress) ? Read::kData : Read::kError;
}

Read ResponseStream::header(Clock::time_point deadline, std::string* error) {
  while (!rx_.head_done()) {
    const Read r = pump(deadline, error);
    if (r != Read::kData) return r;
  }
  return Read::kData;
}

Read ResponseStream::body(std::string* out, Clock::time_point deadline, std::string* error) {
  while (!rx_.done()) {
    const Read r = pump(deadline, error);
    if (r != Read::kData) return r;
  }
  *out = body_;
  return Read::kData;
}

Read ResponseStream::next_data(std::string* data, Clock::time_point deadline, std::string* error) {
  while (true) {
    if (sse_.next(data)) return Read::kData;
    if (rx_.done()) return Read::kEof;
    const Read r = pump(deadline, error);
    if (r != Read::kData) return r;
  }
}

HttpClient::HttpClient(std::string host, int port, bool keep_alive)
    : host_(std::move(host)), port_(port), keep_alive_(keep_alive) {}

bool HttpClient::dial(std::string* error) {
  response_.reset();
  socket_ = BlockingSocket::tcp(host_, port_, 0, error);
  if (!socket_.valid()) return false;
  ++dials_;
  response_.emplace(socket_);
  return true;
}

Read HttpClient::request(std::string_view method, std::string_view target, std::string_view json_body,
                         Clock::time_point deadline, std::string* error) {
  const std::string req =
      http_request({.method = method, .target = target, .host = host_, .body = json_body, .keep_alive = keep_alive_});
  // A kept connection the server has since closed fails before any reply byte: once more, fresh.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = socket_.valid();
    if (!reused && !dial(error)) return Read::kError;
    const bool sent = socket_.send_all(req, deadline, error);
    const Read r = sent ? response_->header(deadline, error) : Read::kError;
    if (r == Read::kData) return r;
    const bool stale = reused && !response_->any_bytes() && (r == Read::kEof || r == Read::kError);
    socket_.close();
    if (!stale) return r == Read::kEof ? (error->assign("the server closed the connection"), r) : r;
  }
  return Read::kError;
}

void HttpClient::finish() {
  if (keep_alive_ && response_ && response_->ended() && response_->keep_alive()) {
    response_->reset();
    return;
  }
  socket_.close();
}

}  // namespace uma
