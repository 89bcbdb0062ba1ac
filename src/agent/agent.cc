#include "agent/agent.h"

#include <spdlog/spdlog.h>

#include <csignal>

#include "cluster/model_catalog.h"

namespace uma::agent {

Agent::Agent(AgentSetup setup)
    : setup_(std::move(setup)),
      store_(setup_.store),
      catalog_(setup_.redis, std::chrono::milliseconds(2000)),
      signals_(io_, SIGINT, SIGTERM),
      server_(io_, setup_.server, [this](const HttpExchangePtr& ex) { api_->handle(ex); }),
      beat_timer_(io_) {}

Agent::~Agent() = default;

Status Agent::lookup(const std::string& id, ModelOrigin* out) {
  cluster::CatalogModel entry;
  std::shared_ptr<const store::Manifest> manifest;
  if (Status s = cluster::catalog_get(catalog_, id, &entry, &manifest); !s.ok()) return s;
  out->bytes = manifest->bytes;
  out->source = {std::move(manifest), entry.url};
  return Status();
}

Status Agent::list(std::vector<AgentApi::CatalogEntry>* out) {
  std::vector<cluster::CatalogModel> all;
  if (Status s = cluster::catalog_list(catalog_, &all); !s.ok()) return s;
  for (const cluster::CatalogModel& m : all) out->push_back({m.id, m.bytes});
  return Status();
}

int Agent::run() {
  if (Status s = server_.listen(); !s.ok()) {
    spdlog::error("{}", s.to_string());
    return 1;
  }
  HostConfig& hc = setup_.host;
  if (setup_.cluster && hc.agent_id.empty()) hc.agent_id = setup_.server.host + ":" + std::to_string(server_.port());
  const ModelHost::Lookup lookup = [this](const std::string& id, ModelOrigin* out) { return this->lookup(id, out); };
  host_ = std::make_unique<ModelHost>(io_, hc, &store_, lookup);
  api_ = std::make_unique<AgentApi>(*host_, store_, lookup,
                                    [this](std::vector<AgentApi::CatalogEntry>* out) { return list(out); });
  server_.start();
  host_->start();
  if (setup_.cluster) {
    beat_ = std::make_unique<publish::LoaderBeat>(setup_.redis);
    beat();
    beat_->start();
  }
  spdlog::info("agent listening on {}:{} (models up to {} MiB and {} at once, keep_alive {} ms, key {}, umads log to {})",
               setup_.server.host, server_.port(), hc.budget.bytes >> 20, hc.budget.models, hc.keep_alive_ms,
               setup_.server.access.api_key.empty() ? "none" : "required", hc.run_dir);
  signals_.async_wait([this](const boost::system::error_code& e, int sig) {
    if (!e) on_signal(sig);
  });
  io_.run();
  store_.stop();  // fills the host may wait for end here
  api_.reset();
  host_.reset();
  spdlog::info("stopped");
  return 0;
}

void Agent::on_signal(int sig) {
  const bool drain = sig == SIGTERM && setup_.drain_sec > 0;
  spdlog::info("signal {}: {} every model", sig, drain ? "draining" : "stopping");
  server_.stop();
  beat_timer_.cancel();
  if (beat_) beat_->stop();  // gateways stop choosing this loader at once
  host_->stop(std::chrono::seconds((drain ? setup_.drain_sec : 0) + 10), [this] { io_.stop(); }, drain);
}

// This loader's state, composed on the I/O thread.
void Agent::beat() {
  cluster::LoaderState l;
  l.id = host_->config().agent_id;
  l.address = "http://" + setup_.server.host + ":" + std::to_string(server_.port());
  for (const store::ModelTierInfo& t : store_.list()) {  // NVMe files included
    if (t.tier == store::Tier::kDram || t.tier == store::Tier::kNvme) l.models.push_back({t.id, t.tier == store::Tier::kDram ? cluster::ModelState::kDram : cluster::ModelState::kNvme});
  }
  for (const ModelInfo& m : host_->models()) {
    std::erase_if(l.models, [&](const cluster::LoaderModel& x) { return x.name == m.id; });
    l.models.push_back({m.id, m.state, m.bytes, m.in_use});
  }
  l.budget_bytes = host_->config().budget.bytes;
  l.held_bytes = host_->held_bytes();
  l.idle_bytes = host_->idle_bytes();
  // Fills as this agent's loads measured them; before one from a tier, its store's own fills.
  const auto rate = [this](store::Tier t) { return host_->fill_rate(t) > 0 ? host_->fill_rate(t) : store_.rate_bytes_s(t); };
  l.start_s = host_->start_s();
  l.stop_s = host_->stop_s();
  l.dram_bytes_s = rate(store::Tier::kDram);
  l.nvme_bytes_s = rate(store::Tier::kNvme);
  l.remote_bytes_s = rate(store::Tier::kRemote);
  l.queue_bytes = store_.queued_bytes();
  beat_->publish(std::move(l));
  beat_timer_.expires_after(std::chrono::milliseconds(250));
  beat_timer_.async_wait([this](const boost::system::error_code& e) {
    if (!e) beat();
  });
}

}  // namespace uma::agent
