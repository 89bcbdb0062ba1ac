#include "ipc/uds_server.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/socket_path.h"

namespace uma {

namespace asio = boost::asio;
using stream_protocol = asio::local::stream_protocol;

namespace {

// The Unix socket's protocols (framed JSON, newline) as the serving layer's adapter: the Protocol
// parses and encodes; this adds the reply in flight and the rules of one request per connection.
class UdsAdapter final : public ProtocolAdapter {
 public:
  UdsAdapter(std::unique_ptr<Protocol> proto, ServerMetrics& metrics) : proto_(std::move(proto)), metrics_(metrics) {}

  void feed(std::string_view bytes) override { proto_->feed(bytes); }
  std::size_t buffered() const override { return proto_->buffered(); }
  std::size_t max_buffered() const override { return proto_->max_buffered(); }

  std::optional<Input> next(bool busy) override {
    for (;;) {
      std::optional<InputAction> action = proto_->next(busy);
      if (!action) return std::nullopt;
      if (auto* err = std::get_if<InputError>(&*action)) {
        return error_answer(Status(err->code, err->message, err->param), err->client_id, err->close);
      }
      if (auto* start = std::get_if<StartInput>(&*action)) {
        if (busy) {
          return error_answer(Status(ErrorCode::kBusy, "request '" + reply_.client_id + "' is still in flight"),
                              start->client_id, false);
        }
        reply_ = ReplyState{std::move(start->client_id), start->stream, start->keep_alive,
                            std::move(start->metadata_json), {}, false, start->request.sampling.logprobs >= 0};
        reply_.prediction = !start->request.prediction.empty();
        return Start{std::move(start->request), 1, {}};
      }
      if (auto* cancel = std::get_if<CancelInput>(&*action)) {
        if (busy && cancel->client_id == reply_.client_id) return Cancel{};
        continue;  // not the request in flight: nothing to cancel
      }
      if (busy) return error_answer(Status(ErrorCode::kBusy, "metrics need a connection of their own"), "", false);
      const bool prom = std::get<MetricsInput>(*action).prometheus;
      Answer a;
      proto_->encode_metrics(prom ? metrics_.to_prometheus() : metrics_.to_json(), prom, a.bytes);
      a.close = true;
      return a;
    }
  }

  void started(RequestId, std::string&) override { metrics_.requests_total++; }
  Answer refused(const Status& why) override { return error_answer(why, reply_.client_id, true); }

  void encode(const Event& ev, std::string& out) override {
    switch (ev.kind) {
      case Event::Kind::kToken: return proto_->encode_token(reply_, ev, out);
      case Event::Kind::kDone: return proto_->encode_done(reply_, ev, out);
      case Event::Kind::kError: return proto_->encode_error(&reply_, reply_.client_id, ev.error, out);
      case Event::Kind::kProgress: return;  // asked for by HTTP's llama-server API only
    }
  }
  bool keep_alive() const override { return reply_.keep_alive; }
  std::string internal_error() override {
    std::string out;
    proto_->encode_error(&reply_, reply_.client_id, Status(ErrorCode::kInternal, "internal error"), out);
    return out;
  }

 private:
  Answer error_answer(const Status& st, const std::string& client_id, bool close) {
    Answer a;
    proto_->encode_error(&reply_, client_id, st, a.bytes);
    a.error = st.code();
    a.close = close;
    return a;
  }

  std::unique_ptr<Protocol> proto_;
  ServerMetrics& metrics_;
  ReplyState reply_;  // the reply in flight (or the last one)
};

}  // namespace

UdsServer::UdsServer(asio::io_context& io, ServerConfig config, ServerMetrics& metrics, StreamServer& serving)
    : config_(std::move(config)), acceptor_(io),
      accept_loop_(io, acceptor_, "unix socket",
                   [&serving](stream_protocol::socket s) { serving.adopt(FrontEnd::kUnixSocket, std::move(s)); },
                   &metrics.accept_pauses_total) {
  serving.add_front_end(front_end_config(FrontEnd::kUnixSocket, config_.max_connections, config_.max_tx_bytes,
                                         config_.idle_timeout_sec, metrics),
                        [this, &metrics] { return std::make_unique<UdsAdapter>(make_protocol(config_.protocol, config_.limits), metrics); });
}

void UdsServer::set_request_limits(std::size_t max_prompt_bytes, std::size_t max_frame_bytes) {
  config_.limits.max_prompt_bytes = max_prompt_bytes;
  config_.limits.max_frame_bytes = max_frame_bytes;
}

UdsServer::~UdsServer() { remove_socket_file(); }

void UdsServer::remove_socket_file() {
  if (listening_) ::unlink(config_.socket_path.c_str());
  listening_ = false;
}

Status UdsServer::listen() {
  int activated = -1;
  if (Status st = activated_socket(config_.socket_path, &activated); !st.ok()) return st;
  if (activated >= 0) {
    // The service manager's socket: its file, mode and group stay as its unit made them.
    boost::system::error_code ec;
    acceptor_.assign(stream_protocol(), activated, ec);
    if (ec) return Status(ErrorCode::kIo, "socket activation: " + ec.message());
    activated_ = true;
    return Status::Ok();
  }
  if (Status st = prepare_socket_path(config_.socket_path); !st.ok()) return st;
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  if (!ec) {
    const mode_t old = ::umask(0177);  // the socket file is born 0600: no window where others can connect
    acceptor_.bind(stream_protocol::endpoint(config_.socket_path), ec);
    ::umask(old);
  }
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status(ErrorCode::kIo, "cannot listen on '" + config_.socket_path + "': " + ec.message());
  ::chmod(config_.socket_path.c_str(), 0600);
  listening_ = true;
  return Status::Ok();
}

void UdsServer::start() { accept_loop_.start(); }

void UdsServer::stop_accepting() {
  accept_loop_.stop();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

}  // namespace uma
