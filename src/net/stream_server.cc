#include "net/stream_server.h"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "net/guarded.h"
#include "serve/choices.h"

namespace uma {

namespace asio = boost::asio;

struct StreamServer::Conn final : Connection {
  Conn(StreamSocket socket, std::uint64_t id, const ConnectionOptions& options, ConnectionOwner& owner,
       std::unique_ptr<ProtocolAdapter> a, FrontEnd f)
      : Connection(std::move(socket), id, options, owner), adapter(std::move(a)), front_end(f) {}
  std::unique_ptr<ProtocolAdapter> adapter;
  FrontEnd front_end;
  RequestId request = 0;  // the request in flight while kBusy (and, once closed, until its last event)
  std::int32_t choices = 0;  // its scheduler requests: ids request .. request + choices - 1
  std::int32_t running = 0;  // of those, the ones whose last event has not come
  bool has_slot = false;  // they hold `choices` of SessionSlots
  std::optional<ProtocolAdapter::Start> waiting;  // a request in line for slots (kBusy, request 0)
  Clock::time_point waiting_since{};
};

FrontEndConfig front_end_config(FrontEnd front_end, std::int32_t max_connections, std::size_t max_tx_bytes,
                                std::int32_t idle_timeout_sec, ServerMetrics& metrics) {
  const bool http = front_end == FrontEnd::kHttp;
  FrontEndConfig s;
  s.front_end = front_end;
  s.log_name = http ? "http conn" : "conn";
  s.max_connections = max_connections;
  s.max_tx_bytes = max_tx_bytes;
  s.idle_timeout_sec = idle_timeout_sec;
  s.eof_closes = http;
  s.connections_open = http ? &metrics.http_connections_open : &metrics.connections_open;
  s.connections_rejected_total = http ? &metrics.http_connections_rejected_total : &metrics.connections_rejected_total;
  return s;
}

StreamServer::StreamServer(asio::io_context& io, ServerMetrics& metrics, SessionSlots& slots, WorkSubmit submit,
                           Offload offload)
    : io_(io), metrics_(metrics), slots_(slots), submit_(std::move(submit)), offload_(std::move(offload)),
      sweep_timer_(io), shutdown_timer_(io) {}

StreamServer::~StreamServer() = default;

void StreamServer::add_front_end(FrontEndConfig config, AdapterFactory make_adapter) {
  Listener& l = listener(config.front_end);
  l.config = config;
  l.make_adapter = std::move(make_adapter);
}

const FrontEndConfig& StreamServer::config_of(const Conn& c) const {
  return listeners_[static_cast<std::size_t>(c.front_end)].config;
}

// Every connection of this server is a Conn: it made them all (adopt).
StreamServer::ConnPtr StreamServer::served(const ConnectionPtr& c) { return std::static_pointer_cast<Conn>(c); }

void StreamServer::start() { sweep_idle(); }

void StreamServer::adopt(FrontEnd f, StreamSocket socket) {
  boost::system::error_code ignored;
  Listener& l = listener(f);
  if (shutting_down_ || !l.make_adapter || l.open >= l.config.max_connections) {
    if (!shutting_down_ && l.config.connections_rejected_total != nullptr) l.config.connections_rejected_total->fetch_add(1);
    socket.close(ignored);
    return;
  }
  ConnectionOptions options;
  options.log_name = l.config.log_name;
  options.max_tx_bytes = l.config.max_tx_bytes;
  options.eof_closes = l.config.eof_closes;
  options.tx_drops = &metrics_.tx_drops_total;
  ConnectionOwner& owner = *this;
  auto c = std::make_shared<Conn>(std::move(socket), table_.next_conn_id(), options, owner, l.make_adapter(), f);
  table_.add(c);
  if (l.config.connections_open != nullptr) l.config.connections_open->store(++l.open);
  metrics_.connections_accepted_total++;
  spdlog::debug("{} {}: accepted", l.config.log_name, c->id());
  c->start_reading();
}

void StreamServer::on_input(const ConnectionPtr& conn, std::string_view bytes) {
  const ConnPtr c = served(conn);
  c->adapter->feed(bytes);
  serve(c);
}

void StreamServer::on_peer_eof(const ConnectionPtr& conn) { serve(served(conn)); }

bool StreamServer::input_full(const Connection& conn) const {
  const ProtocolAdapter& a = *static_cast<const Conn&>(conn).adapter;
  return a.buffered() > a.max_buffered() + Connection::kReadChunk;
}

// Serves the buffered input in order, as far as the connection's state allows.
void StreamServer::serve(const ConnPtr& c) {
  while (!shutting_down_ && (c->state() == ConnState::kIdle || c->state() == ConnState::kBusy)) {
    std::optional<ProtocolAdapter::Input> in = c->adapter->next(c->state() == ConnState::kBusy);
    if (!in) break;
    if (auto* start = std::get_if<ProtocolAdapter::Start>(&*in)) {
      start_request(c, std::move(*start));
    } else if (auto* a = std::get_if<ProtocolAdapter::Answer>(&*in)) {
      answer(c, std::move(*a));
    } else if (auto* d = std::get_if<ProtocolAdapter::Defer>(&*in)) {
      if (defer(c, std::move(*d))) return;  // served again once prepared
    } else if (c->request != 0) {  // Cancel
      cancel_all(c);
    } else if (c->waiting) {  // Cancel before it started
      refuse_waiting(c, Status(ErrorCode::kTooManySessions, "cancelled while waiting for a session"));
    }
  }
  if (c->state() == ConnState::kIdle && (c->peer_eof() || shutting_down_)) c->close_when_flushed();
}

bool StreamServer::defer(const ConnPtr& c, ProtocolAdapter::Defer d) {
  auto work = std::make_shared<std::function<void()>>(std::move(d.work));
  // The job holds the connection weakly: one that closes meanwhile is freed as usual, and what
  // its adapter deferred is dropped with the job.
  const bool offloaded = offload_ && offload_([this, weak = std::weak_ptr<Conn>(c), work] {
    (*work)();
    asio::post(io_, [this, weak] {
      if (ConnPtr c = weak.lock()) prepared(c);
    });
  });
  if (!offloaded) {
    (*work)();
    return false;
  }
  c->set_state(ConnState::kPreparing);
  metrics_.inputs_prepared_off_io_total++;
  return true;
}

void StreamServer::prepared(const ConnPtr& c) {
  if (c->state() != ConnState::kPreparing) return;  // closing or closed meanwhile
  c->set_state(ConnState::kIdle);
  run_guarded([&] { serve(c); }, [&](const char* what) { on_failure(c, what); });
  c->start_reading();  // reading may have paused on a full input meanwhile
}

void StreamServer::start_request(const ConnPtr& c, ProtocolAdapter::Start start) {
  const std::int32_t n = std::max(1, start.choices);
  if (n > slots_.max()) {  // never satisfiable: the client's error, not a busy server
    return answer(c, c->adapter->refused(Status(ErrorCode::kBadRequest,
                                                std::to_string(n) + " choices need more sessions than the " +
                                                    std::to_string(slots_.max()) + " of --max-sessions", "n")));
  }
  // Those in line go first: a request takes free slots only when nobody waits.
  if (waiting_.empty() && slots_.try_take(c->front_end, n)) return begin_request(c, std::move(start));
  if (static_cast<std::int32_t>(waiting_.size()) >= slot_queue_.max_waiting) {
    metrics_.count_rejected(RejectReason::kSessionCap);
    const std::string what = (n == 1 ? "all " + std::to_string(slots_.max()) + " sessions are in use"
                                     : std::to_string(n) + " choices need " + std::to_string(n) + " of " +
                                           std::to_string(slots_.max()) + " sessions, and not that many are free") +
                             ", and " + std::to_string(waiting_.size()) + " requests wait for one (--max-queue)";
    return answer(c, c->adapter->refused(Status(ErrorCode::kTooManySessions, what)));
  }
  c->waiting = std::move(start);
  c->waiting_since = Clock::now();
  c->set_state(ConnState::kBusy);
  waiting_.push_back(c);
  metrics_.sessions_waiting.store(static_cast<std::int64_t>(waiting_.size()));
}

void StreamServer::begin_request(const ConnPtr& c, ProtocolAdapter::Start start) {
  const std::int32_t n = std::max(1, start.choices);
  c->has_slot = true;
  Request r = std::move(start.request);
  r.id = table_.bind(c, n);
  r.received_at = Clock::now();
  c->running = n;
  if (c->state() != ConnState::kBusy) c->set_state(ConnState::kBusy);
  std::string out;
  c->adapter->started(r.id, out);
  c->send(out);
  spdlog::debug("{} {}: request {} ({} bytes, {} choices)", config_of(*c).log_name, c->id(), r.id, r.prompt.size(), n);
  std::vector<Request> choices = expand_choices(std::move(r), n, start.prompts);
  // Choice 0 last: the others are submitted first, as before (admission order).
  for (std::size_t i = 1; i < choices.size(); ++i) submit_(std::move(choices[i]));
  submit_(std::move(choices[0]));
}

void StreamServer::admit_waiting() {
  while (!waiting_.empty() && !shutting_down_) {
    const ConnPtr c = waiting_.front();
    if (!slots_.try_take(c->front_end, std::max(1, c->waiting->choices))) break;
    waiting_.pop_front();
    metrics_.sessions_waiting.store(static_cast<std::int64_t>(waiting_.size()));
    ProtocolAdapter::Start start = std::move(*c->waiting);
    c->waiting.reset();
    run_guarded([&] { begin_request(c, std::move(start)); }, [&](const char* what) { on_failure(c, what); });
  }
}

void StreamServer::leave_line(const ConnPtr& c) {
  if (!c->waiting) return;
  c->waiting.reset();
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), c), waiting_.end());
  metrics_.sessions_waiting.store(static_cast<std::int64_t>(waiting_.size()));
  admit_waiting();  // a multi-choice request at the head may have held back smaller ones behind it
}

void StreamServer::refuse_waiting(const ConnPtr& c, Status why) {
  leave_line(c);
  if (c->closed()) return;
  c->set_state(ConnState::kIdle);
  answer(c, c->adapter->refused(why));
  if (!c->closed() && c->state() == ConnState::kIdle) {
    if (!c->adapter->keep_alive() || shutting_down_) return c->close_when_flushed();
    serve(c);
    c->start_reading();  // reading may have paused on a full input while it waited
  }
}

void StreamServer::expire_waiting() {
  const auto now = Clock::now();
  std::vector<ConnPtr> late;
  for (const ConnPtr& c : waiting_) {
    if (now - c->waiting_since > slot_queue_.max_wait) late.push_back(c);
  }
  for (const ConnPtr& c : late) {
    metrics_.count_rejected(RejectReason::kQueueTimeout);
    refuse_waiting(c, Status(ErrorCode::kTooManySessions,
                             "waited " + std::to_string(slot_queue_.max_wait.count()) + " ms for a session (--max-queue-ms)"));
  }
}

void StreamServer::cancel_all(const ConnPtr& c) {
  // Cancelling a request that already ended is a no-op (CancelRequest is idempotent).
  for (std::int32_t i = 0; i < c->choices; ++i) submit_(CancelRequest{c->request + static_cast<RequestId>(i)});
}

void StreamServer::answer(const ConnPtr& c, ProtocolAdapter::Answer a) {
  if (a.error != ErrorCode::kOk) metrics_.count_error(a.error);
  c->send(a.bytes);
  if (a.close) c->close_when_flushed();
}

void StreamServer::deliver(std::vector<Event> events) {
  asio::post(io_, [this, events = std::move(events)]() mutable { on_events(events); });
}

void StreamServer::on_events(std::vector<Event>& events) {
  for (const Event& ev : events) {
    const ConnPtr c = table_.find(ev.request_id);  // a copy: ending the request erases the table's
    if (c == nullptr) continue;                    // already ended (an internal error cancelled it)
    run_guarded([&] { on_event(c, ev); }, [&](const char* what) { on_failure(c, what); });
  }
}

void StreamServer::on_event(const ConnPtr& c, const Event& ev) {
  const bool ends = ev.kind == Event::Kind::kDone || ev.kind == Event::Kind::kError;
  const bool last = ends && --c->running == 0;
  if (ev.kind == Event::Kind::kError) metrics_.count_error(ev.error.code());
  if (!c->closed()) {  // nobody reads a closed one: only the request's end matters
    std::string out;
    c->adapter->encode(ev, out);
    c->send(out);
  }
  if (last) end_request(c);
}

void StreamServer::release_request(const ConnPtr& c) {
  const std::int32_t n = c->choices;
  table_.unbind(c);
  c->running = 0;
  if (c->has_slot) {
    c->has_slot = false;
    for (std::int32_t i = 0; i < n; ++i) slots_.give_back(c->front_end);
    admit_waiting();
  }
}

void StreamServer::end_request(const ConnPtr& c) {
  release_request(c);
  if (c->closed()) return;  // the client left; its cancel's last event ends the request here
  if (c->state() == ConnState::kBusy) c->set_state(ConnState::kIdle);
  if (!c->adapter->keep_alive() || shutting_down_) return c->close_when_flushed();
  serve(c);
  c->start_reading();  // reading may have paused on a full input while the request ran
}

void StreamServer::on_close(const ConnectionPtr& conn) {
  const ConnPtr c = served(conn);
  leave_line(c);
  if (c->request != 0) {
    // The client left (or was dropped) mid-request: cancel it so its KV is freed at the next tick.
    // It keeps its table entry and session slot until its last event (end_request), so a new
    // request cannot take the slot while the scheduler still runs this one.
    cancel_all(c);
    if (!shutting_down_) metrics_.disconnects_mid_stream_total++;
  }
  table_.remove(c);
  Listener& l = listener(c->front_end);
  if (l.config.connections_open != nullptr) l.config.connections_open->store(--l.open);
  else --l.open;
  maybe_done();
}

void StreamServer::on_failure(const ConnectionPtr& conn, const char* what) {
  const ConnPtr c = served(conn);
  metrics_.count_error(ErrorCode::kInternal);
  spdlog::error("{} {}: internal error, connection closed: {}", config_of(*c).log_name, c->id(), what);
  if (c->closed()) return;
  try {
    if (c->request != 0) {  // nothing more of it is sent: cancel it now; no event reaches it after
      cancel_all(c);
      release_request(c);
    }
    c->send(c->adapter->internal_error());
    c->close_when_flushed();
  } catch (...) {
    c->close("internal error");
  }
}

void StreamServer::sweep_idle() {
  if (!shutting_down_) {
    const auto now = Connection::Clock::now();
    for (const ConnPtr& c : table_.snapshot()) {
      const std::int32_t limit = config_of(*c).idle_timeout_sec;
      if (limit > 0 && c->state() == ConnState::kIdle && c->flushed() && now - c->quiet_since() > std::chrono::seconds(limit)) {
        metrics_.idle_timeouts_total++;
        c->close("idle timeout");
      }
    }
    expire_waiting();
  }
  sweep_timer_.expires_after(std::chrono::seconds(1));
  sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !shutting_down_) sweep_idle();
  });
}

void StreamServer::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  sweep_timer_.cancel();
  const std::deque<ConnPtr> line = waiting_;
  for (const ConnPtr& c : line) refuse_waiting(c, Status(ErrorCode::kShuttingDown, "the daemon is stopping"));
  for (const ConnPtr& c : table_.snapshot()) {
    if (c->state() == ConnState::kIdle) c->close_when_flushed();
  }
}

void StreamServer::finish_shutdown(std::chrono::milliseconds deadline, std::function<void()> done) {
  shutting_down_ = true;
  on_all_closed_ = std::move(done);
  for (const ConnPtr& c : table_.snapshot()) c->close_when_flushed();
  shutdown_timer_.expires_after(deadline);
  shutdown_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    for (const ConnPtr& c : table_.snapshot()) c->close("shutdown deadline");
    maybe_done();
  });
  maybe_done();
}

void StreamServer::maybe_done() {
  if (!on_all_closed_ || !table_.empty()) return;
  shutdown_timer_.cancel();
  auto done = std::move(on_all_closed_);
  on_all_closed_ = nullptr;
  done();
}

}  // namespace uma
