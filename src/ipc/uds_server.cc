#include "ipc/uds_server.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "net/guarded.h"
#include "net/tx_queue.h"
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>

#include "ipc/socket_path.h"

namespace uma {

namespace asio = boost::asio;
using stream_protocol = asio::local::stream_protocol;

enum class ConnState : std::uint8_t { kIdle, kBusy, kClosing, kClosed };

// The transitions the server is written for (memcached's conn_set_state idea): a request makes an
// idle connection busy and its end idle again; either may start closing (flush, then close) or
// close at once; closed is final. A repeated "closing" (an error answer while flushing) is a no-op.
bool legal(ConnState from, ConnState to) {
  switch (from) {
    case ConnState::kIdle: return to != ConnState::kIdle;
    case ConnState::kBusy: return to != ConnState::kBusy;
    case ConnState::kClosing: return to == ConnState::kClosing || to == ConnState::kClosed;
    case ConnState::kClosed: return false;
  }
  return false;
}

struct UdsServer::Conn {
  Conn(asio::io_context& io, std::uint64_t conn_id, std::unique_ptr<Protocol> p, std::size_t max_tx_bytes)
      : id(conn_id), socket(io), proto(std::move(p)), tx(max_tx_bytes), last_activity(Clock::now()) {}
  std::uint64_t id;
  stream_protocol::socket socket;
  std::unique_ptr<Protocol> proto;
  ReplyState reply;         // the reply in flight while kBusy
  TxQueue tx;               // unsent bytes, capped at max_tx_bytes
  ConnState state = ConnState::kIdle;  // changed only through set_state()
  void set_state(ConnState to) {
    if (!legal(state, to)) {
      spdlog::critical("conn {}: illegal state change {} -> {}", id, static_cast<int>(state), static_cast<int>(to));
      std::abort();
    }
    state = to;
  }
  RequestId request = 0;    // the request in flight while kBusy
  bool reading = false;
  bool peer_eof = false;    // client half-closed: serve what it sent, then close
  bool has_slot = false;    // the request in flight holds one of SessionSlots
  Clock::time_point last_activity;
  std::array<char, 4096> rbuf{};
};

UdsServer::UdsServer(asio::io_context& io, ServerConfig config, ServerMetrics& metrics, SessionSlots& slots,
                     WorkSubmit submit)
    : io_(io), config_(std::move(config)), metrics_(metrics), slots_(slots), submit_(std::move(submit)),
      table_(config_.max_connections, &metrics.connections_open, 1), acceptor_(io),
      accept_loop_(io, acceptor_, "unix socket", [this](stream_protocol::socket s) { on_accept(std::move(s)); },
                   &metrics.accept_pauses_total),
      sweep_timer_(io), shutdown_timer_(io) {}

UdsServer::~UdsServer() {
  if (listening_) ::unlink(config_.socket_path.c_str());
}

Status UdsServer::listen() {
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

void UdsServer::start() {
  accept_loop_.start();
  sweep_idle();
}

void UdsServer::on_accept(stream_protocol::socket socket) {
  if (shutting_down_) return;
  if (table_.full()) {
    metrics_.connections_rejected_total++;
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  auto c = std::make_shared<Conn>(io_, table_.next_conn_id(), make_protocol(config_.protocol, config_.limits),
                                  config_.max_tx_bytes);
  c->socket = std::move(socket);
  table_.add(c);
  metrics_.connections_accepted_total++;
  spdlog::debug("conn {}: accepted", c->id);
  arm_read(c);
}

template <typename F>
void UdsServer::guarded(const ConnPtr& c, F&& f) {
  run_guarded(std::forward<F>(f), [&](const char* what) { fail_internal(c, what); });
}

void UdsServer::fail_internal(const ConnPtr& c, const char* what) {
  metrics_.count_error(ErrorCode::kInternal);
  spdlog::error("conn {}: internal error, connection closed: {}", c->id, what);
  if (c->state == ConnState::kClosed) return;
  try {
    if (c->request != 0) {  // nothing more of it is sent: cancel it now; no event reaches it after
      submit_(CancelRequest{c->request});
      table_.unbind(c);
      release_slot(c);
    }
    std::string out;
    c->proto->encode_error(&c->reply, c->reply.client_id, Status(ErrorCode::kInternal, "internal error"), out);
    send(c, out);
    close_when_flushed(c);  // cancels a request in flight when it closes
  } catch (...) {
    close(c, "internal error");
  }
}

void UdsServer::arm_read(const ConnPtr& c) {
  // Backpressure on input: stop reading while parsed-but-unserved bytes exceed one prompt.
  if (c->reading || c->peer_eof || c->state == ConnState::kClosed ||
      c->proto->buffered() > c->proto->max_buffered() + c->rbuf.size()) {
    return;
  }
  c->reading = true;
  c->socket.async_read_some(asio::buffer(c->rbuf), [this, c](const boost::system::error_code& ec, std::size_t n) {
    c->reading = false;
    guarded(c, [&] { on_read(c, ec, n); });
  });
}

void UdsServer::on_read(const ConnPtr& c, const boost::system::error_code& ec, std::size_t n) {
  if (c->state == ConnState::kClosed) return;
  if (ec == asio::error::eof) {
    // EOF is either a half-close (the client still wants its replies) or a full close. A Unix
    // socket reports POLLHUP only for the latter: then cancel now, even mid-prefill, instead of
    // finding out at the first failed write.
    pollfd p{c->socket.native_handle(), 0, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) != 0) {
      close(c, "peer closed");
      return;
    }
    c->peer_eof = true;
  } else if (ec) {
    close(c, "read error");
    return;
  } else {
    c->last_activity = Clock::now();
    c->proto->feed(std::string_view(c->rbuf.data(), n));
  }
  serve_input(c);
  arm_read(c);
}

void UdsServer::serve_input(const ConnPtr& c) {
  while (!shutting_down_ && (c->state == ConnState::kIdle || c->state == ConnState::kBusy)) {
    std::optional<InputAction> action = c->proto->next(c->state == ConnState::kBusy);
    if (!action) break;
    handle(c, *action);
  }
  if (c->state == ConnState::kIdle && (c->peer_eof || shutting_down_)) close_when_flushed(c);
}

void UdsServer::handle(const ConnPtr& c, InputAction& action) {
  const bool busy = c->state == ConnState::kBusy;
  if (auto* err = std::get_if<InputError>(&action)) {
    metrics_.count_error(err->code);
    send_error(c, Status(err->code, err->message, err->param), err->client_id);
    if (err->close) close_when_flushed(c);
  } else if (auto* start = std::get_if<StartInput>(&action)) {
    if (busy) {
      metrics_.count_error(ErrorCode::kBusy);
      send_error(c, Status(ErrorCode::kBusy, "request '" + c->reply.client_id + "' is still in flight"), start->client_id);
    } else {
      start_request(c, std::move(*start));
    }
  } else if (auto* cancel = std::get_if<CancelInput>(&action)) {
    if (busy && cancel->client_id == c->reply.client_id) submit_(CancelRequest{c->request});
  } else if (busy) {  // metrics while a request is in flight
    metrics_.count_error(ErrorCode::kBusy);
    send_error(c, Status(ErrorCode::kBusy, "metrics need a connection of their own"), "");
  } else {
    const bool prom = std::get<MetricsInput>(action).prometheus;
    std::string out;
    c->proto->encode_metrics(prom ? metrics_.to_prometheus() : metrics_.to_json(), prom, out);
    send(c, out);
    close_when_flushed(c);
  }
}

void UdsServer::start_request(const ConnPtr& c, StartInput input) {
  if (!slots_.try_take(FrontEnd::kUnixSocket)) {
    metrics_.count_error(ErrorCode::kTooManySessions);
    metrics_.count_rejected(RejectReason::kSessionCap);
    send_error(c, Status(ErrorCode::kTooManySessions, "all " + std::to_string(slots_.max()) + " sessions are in use"),
               input.client_id);
    close_when_flushed(c);
    return;
  }
  c->has_slot = true;
  Request r = std::move(input.request);
  r.id = table_.bind(c);
  r.received_at = Clock::now();
  c->reply = ReplyState{std::move(input.client_id), input.stream, input.keep_alive, std::move(input.metadata_json), {}, false};
  c->set_state(ConnState::kBusy);
  metrics_.requests_total++;
  spdlog::debug("conn {}: request {} ({} bytes)", c->id, r.id, r.prompt.size());
  submit_(std::move(r));
}

void UdsServer::send(const ConnPtr& c, std::string_view bytes) {
  if (c->state == ConnState::kClosed || bytes.empty()) return;
  if (!c->tx.push(bytes)) {
    metrics_.tx_drops_total++;
    spdlog::warn("conn {}: dropped, reader too slow ({} bytes unsent)", c->id, c->tx.unsent());
    close(c, "tx cap");
    return;
  }
  arm_write(c);
}

void UdsServer::send_error(const ConnPtr& c, const Status& error, const std::string& client_id) {
  std::string out;
  c->proto->encode_error(&c->reply, client_id, error, out);
  send(c, out);
}

void UdsServer::arm_write(const ConnPtr& c) {
  if (!c->tx.can_start() || c->state == ConnState::kClosed) return;
  const std::string_view bytes = c->tx.begin_write();
  asio::async_write(c->socket, asio::buffer(bytes.data(), bytes.size()), [this, c](const boost::system::error_code& ec, std::size_t) {
    c->tx.finish_write();
    if (c->state == ConnState::kClosed) return;
    if (ec) {
      close(c, "write error");
      return;
    }
    c->last_activity = Clock::now();
    if (c->tx.can_start()) arm_write(c);
    else if (c->state == ConnState::kClosing) close(c, "done");
  });
}

void UdsServer::finish_reply(const ConnPtr& c) {
  table_.unbind(c);
  release_slot(c);
  if (c->state == ConnState::kClosed) return;  // a cancelled request of a gone client ends here
  const bool keep = c->reply.keep_alive;
  c->reply = ReplyState{};
  if (c->state == ConnState::kBusy) c->set_state(ConnState::kIdle);
  if (!keep) {
    close_when_flushed(c);
    return;
  }
  serve_input(c);
  arm_read(c);
}

void UdsServer::release_slot(const ConnPtr& c) {
  if (!c->has_slot) return;
  c->has_slot = false;
  slots_.give_back(FrontEnd::kUnixSocket);
}

void UdsServer::close_when_flushed(const ConnPtr& c) {
  if (c->state == ConnState::kClosed) return;
  c->set_state(ConnState::kClosing);
  if (c->tx.flushed()) close(c, "done");
}

void UdsServer::close(const ConnPtr& c, const char* why) {
  if (c->state == ConnState::kClosed) return;
  if (c->request != 0) {
    // The client left (or was dropped) mid-request: cancel it so its KV is freed at the next tick.
    // It keeps its table entry and session slot until its last event (finish_reply), so a new
    // request cannot take the slot while the scheduler still runs this one.
    submit_(CancelRequest{c->request});
    if (!shutting_down_) metrics_.disconnects_mid_stream_total++;
  }
  c->set_state(ConnState::kClosed);
  boost::system::error_code ignored;
  c->socket.close(ignored);  // pending operations complete with operation_aborted; they see kClosed
  table_.remove(c);
  spdlog::debug("conn {}: closed ({})", c->id, why);
  maybe_done();
}

void UdsServer::deliver(std::vector<Event> events) {
  asio::post(io_, [this, events = std::move(events)]() mutable { on_events(events); });
}

void UdsServer::on_events(std::vector<Event>& events) {
  std::string out;
  for (Event& ev : events) {
    const ConnPtr c = table_.find(ev.request_id);
    if (c == nullptr) continue;  // its connection is gone: nobody is waiting
    out.clear();
    guarded(c, [&] { on_event(c, ev, out); });
  }
}

void UdsServer::on_event(const ConnPtr& c, Event& ev, std::string& out) {
  if (c->state == ConnState::kClosed) {  // nobody reads: only the request's end matters
    if (ev.kind != Event::Kind::kToken) finish_reply(c);
    return;
  }
  switch (ev.kind) {
    case Event::Kind::kToken:
      c->proto->encode_token(c->reply, ev, out);
      send(c, out);
      break;
    case Event::Kind::kDone:
      c->proto->encode_done(c->reply, ev, out);
      send(c, out);
      finish_reply(c);
      break;
    case Event::Kind::kError:
      metrics_.count_error(ev.error.code());
      c->proto->encode_error(&c->reply, c->reply.client_id, ev.error, out);
      send(c, out);
      finish_reply(c);
      break;
  }
}

void UdsServer::sweep_idle() {
  if (config_.idle_timeout_sec > 0 && !shutting_down_) {
    const auto limit = std::chrono::seconds(config_.idle_timeout_sec);
    const Clock::time_point now = Clock::now();
    for (const ConnPtr& c : table_.snapshot()) {
      if (c->state == ConnState::kIdle && c->tx.flushed() && now - c->last_activity > limit) {
        metrics_.idle_timeouts_total++;
        close(c, "idle timeout");
      }
    }
  }
  sweep_timer_.expires_after(std::chrono::seconds(1));
  sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !shutting_down_) sweep_idle();
  });
}

void UdsServer::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  accept_loop_.stop();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  sweep_timer_.cancel();
  for (const ConnPtr& c : table_.snapshot()) {
    if (c->state == ConnState::kIdle) close_when_flushed(c);
  }
}

void UdsServer::finish_shutdown(std::chrono::milliseconds deadline, std::function<void()> done) {
  on_all_closed_ = std::move(done);
  for (const ConnPtr& c : table_.snapshot()) close_when_flushed(c);
  shutdown_timer_.expires_after(deadline);
  shutdown_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    for (const ConnPtr& c : table_.snapshot()) close(c, "shutdown deadline");
    maybe_done();
  });
  maybe_done();
}

void UdsServer::maybe_done() {
  if (!on_all_closed_ || !table_.empty()) return;
  shutdown_timer_.cancel();
  if (listening_) {
    ::unlink(config_.socket_path.c_str());
    listening_ = false;
  }
  auto done = std::move(on_all_closed_);
  on_all_closed_ = nullptr;
  done();
}

}  // namespace uma
