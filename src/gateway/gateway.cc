#include "gateway/gateway.h"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>

#include "chat/structured_output.h"
#include "gateway/cluster_view.h"

namespace uma::gateway {

Gateway::Gateway(GatewaySetup setup)
    : setup_(std::move(setup)), signals_(io_, SIGINT, SIGTERM), drain_poll_(io_) {}

Gateway::~Gateway() {
  if (refresher_.joinable()) {  // run() returned early
    {
      const std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    refresher_.join();
  }
}

int Gateway::run() {
  Status st;
  std::shared_ptr<const Vocabulary> fallback;
  if (!setup_.model.empty() && !(fallback = open_vocabulary(setup_.model, setup_.vocab.chat_template, &st))) {
    spdlog::error("--model: {}", st.to_string());
    return 1;
  }
  vocabs_ = std::make_unique<VocabCache>(setup_.vocab, setup_.redis, fallback);
  cold_loads_ = std::make_unique<ColdLoads>(io_, setup_.redis, setup_.loads);
  DirectoryOptions directory;
  // A request goes to its agent whole: the connection holds any body the gateway takes.
  directory.upstream.max_tx_bytes = std::max(directory.upstream.max_tx_bytes, setup_.server.max_body_bytes + (std::size_t{1} << 20));
  agents_ = std::make_unique<AgentDirectory>(
      io_, directory,
      [this](const std::string& id, bool hung) {
        if (server_) server_->agent_gone(id, hung);
      },
      [this] {
        if (server_) server_->kick();
      });
  server_ = std::make_unique<GatewayServer>(io_, setup_.server, *agents_, *vocabs_, json_schema_to_gbnf, cold_loads_.get());
  agents_->set_on_draining([this](const std::string& id) {
    if (server_) server_->agent_draining(id);
  });
  if (st = server_->listen(); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  server_->start();
  agents_->start();  // the streams' silence checks
  refresher_ = std::thread([this] { read_views(); });
  await_signal();
  spdlog::info("uma-gw: policy {}, redis {}, vocabulary for models outside the catalog: {}", setup_.policy_name,
               setup_.redis_text, setup_.model.empty() ? "none" : setup_.model);
  std::cout << "uma-gw listening on http://" << setup_.server.host << ":" << server_->port() << std::endl;
  io_.run();
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  refresher_.join();
  server_.reset();
  return 0;
}

// Its own thread and Redis connection; each view goes to the I/O thread.
void Gateway::read_views() {
  gateway::ClusterView view(setup_.redis, std::chrono::milliseconds(200), std::chrono::milliseconds(3000));
  bool was_down = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const Status rs = view.refresh(std::chrono::system_clock::now());
    if (!rs.ok() && !was_down) spdlog::warn("cannot read redis ({}): routing on the last view", rs.message());
    if (rs.ok() && was_down) spdlog::info("redis answers again");
    was_down = !rs.ok();
    if (rs.ok()) vocabs_->set_catalog(view.catalog_vocab());
    boost::asio::post(io_, [this, agents_now = view.agents(), catalog = view.catalog(), loaders = view.loaders()]() mutable {
      agents_->set_catalog(std::move(catalog));
      agents_->set_loaders(std::move(loaders));
      agents_->update(agents_now, SteadyClock::now());
    });
    lock.lock();
    cv_.wait_for(lock, setup_.refresh, [this] { return stopping_; });
  }
}

void Gateway::stop_now() {
  drain_poll_.cancel();
  server_->stop();
  io_.stop();
}

void Gateway::poll_drained() {
  if (server_->idle() || SteadyClock::now() >= drain_until_) {
    spdlog::info("{}", server_->idle() ? "drained: stopping" : "--drain-sec is over: stopping with requests in flight");
    return stop_now();
  }
  drain_poll_.expires_after(std::chrono::milliseconds(100));
  drain_poll_.async_wait([this](const boost::system::error_code& e) {
    if (!e) poll_drained();
  });
}

void Gateway::await_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig != SIGTERM || setup_.drain_sec == 0 || server_->draining()) return stop_now();
    spdlog::info("signal {}: draining for up to {} s", sig, setup_.drain_sec);
    drain_until_ = SteadyClock::now() + std::chrono::seconds(setup_.drain_sec);
    server_->drain_clients();
    poll_drained();
    await_signal();
  });
}

}  // namespace uma::gateway
