#include "httpkit/http_wire.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include <cstdio>

namespace uma {

namespace http = boost::beast::http;

namespace {

std::string status_line(unsigned status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(http::obsolete_reason(static_cast<http::status>(status))) +
         "\r\n";
}

std::string_view connection(bool keep_alive) {
  return keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
}

}  // namespace

std::string http_reply(unsigned status, std::string_view content_type, std::string_view body, bool keep_alive,
                       std::string_view extra) {
  std::string out = status_line(status);
  out += "Content-Type: ";
  out += content_type;
  out += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  out += extra;
  out += connection(keep_alive);
  out += body;
  return out;
}

std::string event_stream_head(bool keep_alive, std::string_view extra, std::string_view content_type) {
  std::string out = status_line(200);
  out += "Content-Type: ";
  out.append(content_type);
  out += "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
  out += extra;
  out += connection(keep_alive);
  return out;
}

std::string http_chunk(std::string_view data) {
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<std::size_t>(n));
  out.append(data);
  out += "\r\n";
  return out;
}

std::string sse_chunk(std::string_view data) {
  std::string event = "data: ";
  event += data;
  event += "\n\n";
  return http_chunk(event);
}

std::string http_request(const ClientRequest& r) {
  std::string out;
  out.reserve(160 + r.body.size());
  out.append(r.method).append(" ").append(r.target).append(" HTTP/1.1\r\nHost: ").append(r.host).append("\r\n");
  if (!r.body.empty()) out.append("Content-Type: application/json\r\n");
  if (!r.body.empty() || r.method == "POST") out.append("Content-Length: ").append(std::to_string(r.body.size())).append("\r\n");
  if (!r.bearer.empty()) out.append("Authorization: Bearer ").append(r.bearer).append("\r\n");
  out.append(r.extra);
  if (!r.keep_alive) out.append("Connection: close\r\n");
  out.append("\r\n").append(r.body);
  return out;
}

std::string_view HttpRequest::header(std::string_view name, bool* present) const {
  const auto it = headers.find(boost::beast::string_view(name.data(), name.size()));
  if (present != nullptr) *present = it != headers.end();
  return it == headers.end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
}

constexpr std::size_t kLeastChunkedRest = 5;

RequestReader::Result RequestReader::next(const HttpLimits& limits, HttpRequest* out, Status* error,
                                          bool* header_too_large) {
  if (in_.empty()) return Result::kNeedMore;
  if (!parser_) {
    parser_.emplace();
    parser_->eager(true);
    parser_->body_limit(limits.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  }
  boost::beast::error_code ec;
  while (!in_.empty() && !parser_->is_done()) {
    // A chunked body's rest is never under 5 bytes (at least "0\r\n\r\n"), and Beast's chunk parser
    // asserts it has that much once it has seen a final chunk's line: feed it no less.
    if (parser_->is_header_done() && parser_->chunked() && in_.size() < kLeastChunkedRest) break;
    const std::size_t used = parser_->put(boost::asio::buffer(in_.data(), in_.size()), ec);
    in_.erase(0, used);
    if (ec == http::error::need_more) ec = {};
    if (ec || used == 0) break;
  }
  if (ec) {
    if (header_too_large != nullptr) *header_too_large = ec == http::error::header_limit;
    if (ec == http::error::body_limit) {
      *error = Status(ErrorCode::kPromptTooLarge,
                      "request body over the limit of " + std::to_string(limits.max_body_bytes) + " bytes");
    } else if (ec == http::error::header_limit) {
      *error = Status(ErrorCode::kBadRequest,
                      "request headers over the limit of " + std::to_string(limits.max_header_bytes) + " bytes");
    } else {
      *error = Status(ErrorCode::kBadRequest, "malformed HTTP request: " + ec.message());
    }
    return Result::kError;
  }
  if (!parser_->is_done()) return Result::kNeedMore;
  http::request<http::string_body> req = parser_->release();
  parser_.reset();
  out->method = req.method();
  out->target = std::string(req.target());
  const auto q = out->target.find('?');
  out->path = out->target.substr(0, q);
  out->query = q == std::string::npos ? std::string() : out->target.substr(q + 1);
  out->keep_alive = req.keep_alive();
  out->body = std::move(req.body());
  out->headers = std::move(req.base());
  return Result::kRequest;
}

ResponseReader::ResponseReader(std::size_t max_body_bytes)
    : max_body_(max_body_bytes), on_chunk_([this](std::uint64_t, boost::beast::string_view data, boost::beast::error_code&) {
        chunk_.append(data.data(), data.size());
        return data.size();
      }) {
  reset();
}

void ResponseReader::reset() {
  parser_.emplace();
  parser_->eager(true);
  parser_->header_limit(64 * 1024);
  parser_->body_limit(max_body_);
  // A chunked body (SSE) is handed on chunk by chunk, never collected in the parser.
  parser_->on_chunk_body(on_chunk_);
}

std::string_view ResponseReader::header(std::string_view name) const {
  const auto& h = parser_->get();
  const auto it = h.find(boost::beast::string_view(name.data(), name.size()));
  return it == h.end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
}

bool ResponseReader::pump(std::string* body, std::string* error) {
  boost::beast::error_code ec;
  while (!in_.empty() && !parser_->is_done()) {
    const std::size_t used = parser_->put(boost::asio::buffer(in_.data(), in_.size()), ec);
    in_.erase(0, used);
    if (ec == http::error::need_more) ec = {};
    if (ec) {
      *error = "bad HTTP response: " + ec.message();
      return false;
    }
    if (used == 0) break;
  }
  body->append(chunk_);
  chunk_.clear();
  // A body with a length (or read to the close) collects in the parser: hand on what is new.
  std::string& whole = parser_->get().body();
  if (!whole.empty()) {
    body->append(whole);
    whole.clear();
  }
  return true;
}

bool ResponseReader::eof() {
  if (in_.empty() && parser_->is_header_done() && !parser_->is_done() && parser_->need_eof()) {
    boost::beast::error_code ec;
    parser_->put_eof(ec);
  }
  return parser_->is_done();
}

bool SseSplitter::next(std::string* data) {
  std::size_t nl;
  while ((nl = buf_.find('\n')) != std::string::npos) {
    std::string_view line(buf_.data(), nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const bool is_data = line.substr(0, 6) == "data: ";
    if (is_data) data->assign(line.substr(6));
    buf_.erase(0, nl + 1);
    if (is_data) return true;
  }
  return false;
}

}  // namespace uma
