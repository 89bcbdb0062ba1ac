// GatewayServer (gateway_server.h): what happens after a request is routed: a proxy's end, an
// agent that goes, streams moved off an agent, the TTFT fit's samples, requests waiting for a
// model or for room (kick, await, enqueue, drain) and the sweep.
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "gateway/gateway_server.h"

namespace uma::gateway {

namespace asio = boost::asio;

void GatewayServer::proxy_done(const HttpExchangePtr& client) {
  auto it = inflight_.find(client.get());
  if (it == inflight_.end()) return;
  if (it->second.proxy) retire(std::move(it->second.proxy));
  inflight_.erase(it);
  client->finish_raw();
}

void GatewayServer::agent_gone(const std::string& id, bool hung) {
  if (!hung) return;  // a stream that broke: its requests' own connections say whether it died
  for (Proxy* p : proxies_at(id)) p->agent_gone();
}

std::vector<Proxy*> GatewayServer::proxies_at(const std::string& agent) const {
  std::vector<Proxy*> at;
  for (const auto& [ex, f] : inflight_) {
    if (f.proxy && f.proxy->agent() == agent && f.proxy->state() != ProxyState::kDone) at.push_back(f.proxy.get());
  }
  return at;
}

std::size_t GatewayServer::move_streams(const std::string& agent, const std::string& why) {
  std::size_t moved = 0;
  for (Proxy* p : proxies_at(agent)) moved += p->migrate(why);
  metrics_.migrated_total += moved;
  return moved;
}

void GatewayServer::agent_draining(const std::string& id) {
  for (Proxy* p : proxies_at(id)) {
    const std::string served = p->model().empty() ? std::string() : agents_.served_name(p->model());
    const bool elsewhere = p->model().empty() ? agents_.live() > 0 : !served.empty() && agents_.serving(served, id) > 0;
    if (elsewhere && p->migrate("agent " + id + " is draining", /*exclude=*/false)) {
      metrics_.drain_moved_total++;
    } else {
      metrics_.drain_left_total++;
    }
  }
}

void GatewayServer::drain_clients() {
  if (stopped_ || server_.draining()) return;
  spdlog::info("draining: {} requests in flight, {} client connections", inflight_.size(), server_.connections());
  server_.drain();
}

void GatewayServer::record_ttft(double predicted_s, double measured_s) {
  metrics_.ttft_ms.observe(measured_s * 1e3);
  if (measured_s <= 0) return;
  const double signed_error = predicted_s / measured_s - 1.0;
  metrics_.ttft_error.observe(std::abs(signed_error));
  if (metrics_.ttft_errors.size() >= GatewayMetrics::kKeep) metrics_.ttft_errors.pop_front();
  metrics_.ttft_errors.push_back(signed_error);
}

void GatewayServer::kick() {
  if (kick_posted_ || waiting_.size() == 0 || stopped_) return;
  kick_posted_ = true;
  asio::post(io_, [this] {
    kick_posted_ = false;
    if (stopped_) return;
    drain();
    wake_awaiting();
  });
}

void GatewayServer::await_model(Proxy* p) {
  metrics_.awaited_model_total++;
  waiting_.wait_for_model(p, p->model(), SteadyClock::now());
  cold_loads_->ensure(p->model(), agents_.loaders());
}

void GatewayServer::stop_awaiting(Proxy* p) {
  if (const auto waited = waiting_.leave(p, SteadyClock::now())) {
    metrics_.model_wait_ms.observe(std::chrono::duration<double, std::milli>(*waited).count());
  }
}

// Requests whose model an agent now serves go out; for the rest the load is seen to (again, if
// the one that ran failed or another gateway's lock lapsed); those that waited too long end.
void GatewayServer::wake_awaiting() {
  const auto verdicts = waiting_.judge_models([this](const std::string& m) { return agents_.lookup(m); }, SteadyClock::now(),
                                              std::chrono::milliseconds(config_.queue_timeout_ms));
  for (Proxy* p : verdicts.ready) p->model_ready();
  for (Proxy* p : verdicts.expired) {
    const std::string why = cold_loads_->last_error(p->model());
    p->model_wait_expired(why.empty() ? "no agent served it within " + std::to_string(config_.queue_timeout_ms) + " ms" : why);
  }
  for (const std::string& model : verdicts.still_cold) cold_loads_->ensure(model, agents_.loaders());
}

void GatewayServer::enqueue(Proxy* p, bool front) {
  if (!front) metrics_.queued_total++;
  waiting_.wait_for_room(p, p->queued_at(), front);
}

void GatewayServer::dequeue(Proxy* p) { waiting_.leave(p, SteadyClock::now()); }

// First come, first served: the oldest waiting request goes first; once one finds no room the
// rest wait too (they would find none either, or jump the queue).
void GatewayServer::drain() {
  while (const std::optional<Proxy*> next = waiting_.next_for_room()) {
    Proxy* p = *next;
    p->wake();
    if (waiting_.front_for_room() == p) break;
    metrics_.queue_wait_ms.observe(std::chrono::duration<double, std::milli>(SteadyClock::now() - p->queued_at()).count());
  }
}

void GatewayServer::sweep() {
  const auto now = SteadyClock::now();
  for (Proxy* p : waiting_.room_expired(now, std::chrono::milliseconds(config_.queue_timeout_ms))) p->queue_expired();
  if (cold_loads_ != nullptr) {
    cold_loads_->make_room_for_queued(agents_.loaders());
    const std::vector<cluster::LoaderState> loaders = cold_loads_->with_own_loads(agents_.loaders());
    for (const FanOut::Prefetch& f : fan_out_.due(loaders, now)) {
      const auto l = std::find_if(loaders.begin(), loaders.end(), [&](const cluster::LoaderState& x) { return x.id == f.loader; });
      if (l != loaders.end()) cold_loads_->prefetch(f.model, *l, fan_out_.options().tier);
    }
  }
  wake_awaiting();
  // An agent that answered 429 counts as full for a second or until its next load report; an
  // idle agent sends no report (its load does not change), so nothing else would wake requests
  // waiting for it: they tried again only at their queue timeout (seen under TSan: 30 s stalls).
  kick();
  sweep_timer_.expires_after(std::chrono::seconds(1));
  sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) sweep();
  });
}

}  // namespace uma::gateway
