#include "gateway/agent_directory.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "httpkit/http_wire.h"

namespace uma::gateway {

AgentLink::AgentLink(AgentDirectory& dir, cluster::AgentState state) : dir_(dir), state_(std::move(state)) {}

AgentLink::~AgentLink() {
  if (stream_) stream_->abort();
}

std::int64_t AgentLink::cached_tokens(std::span<const std::uint64_t> prompt_blocks) const {
  std::size_t n = 0;
  while (n < prompt_blocks.size() && (blocks_.count(prompt_blocks[n]) != 0 || inflight_blocks_.count(prompt_blocks[n]) != 0)) ++n;
  return static_cast<std::int64_t>(n) * kBlockTokens;
}

std::int64_t AgentLink::pending_tokens() const {
  std::int64_t sum = 0;
  for (const auto& [id, d] : dispatches_) {
    if (d.admitted_by > admitted_) sum += d.tokens;  // its last report does not cover it yet
  }
  return sum;
}

std::int64_t AgentLink::sessions_in_use() const {
  std::int64_t mine = 0;
  for (const auto& [id, d] : dispatches_) mine += d.admitted_by > admitted_ ? 1 : 0;  // not in its last report
  return state_.active_sessions + state_.queued_sessions + mine;
}

bool AgentLink::has_room(SteadyClock::time_point now) const {
  if (now < full_until_) return false;
  return state_.max_sessions <= 0 || sessions_in_use() < state_.max_sessions;
}

void AgentLink::subscribe(SteadyClock::time_point now) {
  HostPort to;
  if (state_.events.empty() || !parse_host_port(state_.events, &to)) return;
  last_dial_ = now;
  sse_ = SseEvents();
  std::string req = http_request({.target = "/kv-events", .host = host_header(to), .extra = "Accept: text/event-stream\r\n"});
  stream_ = Upstream::start(dir_.io(), to, std::move(req), this, dir_.options().upstream);
}

void AgentLink::stream_down(const std::string& why, bool hung) {
  const bool was = live_;
  live_ = false;
  stream_.reset();  // the upstream holds itself while it calls us
  blocks_.clear();
  if (was) {
    spdlog::warn("agent {}: event stream down ({}): out of routing", state_.id, why);
    if (dir_.on_gone_) dir_.on_gone_(state_.id, hung);
  }
}

void AgentLink::on_head(unsigned status, bool event_stream) {
  if (status != 200 || !event_stream) {
    if (stream_) stream_->abort();
    stream_down("event stream answered " + std::to_string(status));
  }
}

void AgentLink::on_body(std::string_view bytes) {
  heard(SteadyClock::now());
  std::vector<SseEvent> events;
  if (Status st = sse_.feed(bytes, &events); !st.ok()) {
    if (stream_) stream_->abort();
    return stream_down(st.message());
  }
  for (const SseEvent& ev : events) {
    if (ev.forward.rfind("data: ", 0) != 0) continue;
    cluster::KvEvent e;
    const std::string_view data = std::string_view(ev.forward).substr(6, ev.forward.size() - 8);
    if (Status st = cluster::decode_kv_event(data, &e); !st.ok()) {
      spdlog::warn("agent {}: bad kv event: {}", state_.id, st.message());
      continue;
    }
    apply(e);
  }
}

void AgentLink::apply(const cluster::KvEvent& e) {
  if (e.snapshot) {
    if (!state_.boot_id.empty() && e.boot_id != state_.boot_id) {
      spdlog::warn("agent {}: stream of boot {} but the view says {}", state_.id, e.boot_id, state_.boot_id);
    }
    blocks_.clear();
    if (!live_) spdlog::info("agent {}: event stream live ({} blocks)", state_.id, e.stored.size());
    live_ = true;
    // Hashes of other-sized blocks never match a prompt's here: its load still counts, its blocks not.
    foreign_blocks_ = e.block != kBlockTokens;
    if (foreign_blocks_) {
      spdlog::warn("agent {}: its blocks are {} tokens, this gateway's {}: routed by load alone", state_.id, e.block,
                   kBlockTokens);
    }
  }
  if (!foreign_blocks_) {
    for (std::uint64_t h : e.stored) blocks_.insert(h);
    for (std::uint64_t h : e.evicted) blocks_.erase(h);
  }
  state_.active_sessions = e.load.active;
  state_.queued_sessions = e.load.queued;
  state_.prefill_backlog_tokens = e.load.backlog;
  // Its count went back: it restarted, and nothing sent before counts toward the new one.
  if (e.load.admitted < admitted_) assigned_ = e.load.admitted;
  admitted_ = e.load.admitted;
  full_until_ = {};
  if (e.draining && !draining_) {
    draining_ = true;
    live_ = false;
    spdlog::info("agent {}: draining: out of routing", state_.id);
    if (dir_.on_draining_) dir_.on_draining_(state_.id);
    return;
  }
  if (dir_.on_room_) dir_.on_room_();
}

AgentDirectory::AgentDirectory(boost::asio::io_context& io, DirectoryOptions options, OnGone on_gone, OnRoom on_room)
    : io_(io), options_(options), on_gone_(std::move(on_gone)), on_room_(std::move(on_room)) {}

AgentDirectory::~AgentDirectory() {
  if (check_timer_) check_timer_->cancel();
}

void AgentDirectory::start() {
  check_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  arm_check();
}

void AgentDirectory::arm_check() {
  check_timer_->expires_after(options_.check_every);
  check_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the directory ends
    check_streams(SteadyClock::now());
    arm_check();
  });
}

void AgentDirectory::check_streams(SteadyClock::time_point now) {
  // Time listened: the gap since the last check, but at most loop_stall of it. A longer gap means
  // the I/O thread was away, and what the agents sent meanwhile may not have been read yet; it
  // still counts for loop_stall, so that stalls that come back again and again (sustained
  // overload) cannot hide a hung agent for ever.
  const SteadyClock::duration gap = last_check_ == SteadyClock::time_point{} ? SteadyClock::duration{} : now - last_check_;
  if (gap > options_.loop_stall) {
    spdlog::debug("gateway: its I/O thread was away {} ms: {} ms of it count as listened",
                  std::chrono::duration_cast<std::chrono::milliseconds>(gap).count(), options_.loop_stall.count());
  }
  listened_ += std::min<SteadyClock::duration>(gap, options_.loop_stall);
  std::vector<std::string> hung;
  for (auto& [id, link] : links_) {
    AgentLink& a = *link;
    if (!a.live_) continue;
    // Heard since the last check (or never checked since it went live): its silence starts here.
    if (a.heard_at_ > last_check_) a.heard_mark_ = listened_;
    if (listened_ - a.heard_mark_ > options_.silent) hung.push_back(id);
  }
  last_check_ = now;
  for (const std::string& id : hung) {
    // Out of routing, and the requests waiting on it go elsewhere; it is dialled again while the
    // view lists it.
    auto it = links_.find(id);
    if (it == links_.end() || !it->second->live_) continue;  // an earlier one's on_gone changed it
    AgentLink& a = *it->second;
    if (a.stream_) a.stream_->abort();
    a.last_dial_ = now;
    a.stream_down("silent: the agent hangs", true);
  }
}

void AgentDirectory::update(const std::vector<cluster::AgentState>& view, SteadyClock::time_point now) {
  std::set<std::string> seen;
  for (const cluster::AgentState& s : view) {
    seen.insert(s.id);
    auto it = links_.find(s.id);
    if (it != links_.end() && it->second->state_.boot_id != s.boot_id) {
      spdlog::info("agent {}: restarted (boot {} -> {})", s.id, it->second->state_.boot_id, s.boot_id);
      links_.erase(it);  // a new process: nothing of the old one's KV or stream holds
      if (on_gone_) on_gone_(s.id, false);
      it = links_.end();
    }
    if (it == links_.end()) {
      it = links_.emplace(s.id, std::make_unique<AgentLink>(*this, s)).first;
    } else {
      // The beat's measured rates, models and address; the load comes from the stream while it is live.
      AgentLink& a = *it->second;
      const cluster::AgentState fresh_load = a.state_;
      a.state_ = s;
      if (a.live_) {
        a.state_.active_sessions = fresh_load.active_sessions;
        a.state_.queued_sessions = fresh_load.queued_sessions;
        a.state_.prefill_backlog_tokens = fresh_load.prefill_backlog_tokens;
      }
    }
    AgentLink& a = *it->second;
    if (!a.stream_ && !a.live_ && !a.draining_ && now - a.last_dial_ >= options_.redial) a.subscribe(now);
  }
  for (auto it = links_.begin(); it != links_.end();) {
    AgentLink& a = *it->second;
    // Gone from the view but its stream still talks: Redis lost it (restarted empty, say), the
    // agent is fine and registers again within a beat (fail-static).
    if (seen.count(it->first) != 0 || a.live_) {
      ++it;
      continue;
    }
    const std::string id = it->first;
    // A draining agent leaves the view on purpose; its requests still in flight are not hung.
    const bool hung = !a.draining_;
    if (hung) spdlog::warn("agent {}: gone from the cluster view: out of routing", id);
    it = links_.erase(it);
    if (on_gone_) on_gone_(id, hung);
  }
}

void AgentDirectory::candidates(std::string_view model, std::span<const std::uint64_t> prompt_blocks,
                                const std::unordered_set<std::string>& exclude, SteadyClock::time_point now,
                                Candidates* out) {
  out->list.clear();
  out->links.clear();
  out->full = 0;
  for (auto& [id, link] : links_) {
    AgentLink& a = *link;
    if (!a.live_ || a.breaker_open(now) || exclude.count(id) != 0) continue;
    if (!model.empty() && a.state_.model(model) == nullptr) continue;
    if (!a.has_room(now)) {
      out->full++;
      continue;
    }
    gateway::Candidate c;
    c.agent = &a.state_;
    c.cached_tokens = a.cached_tokens(prompt_blocks);
    c.pending_tokens = a.pending_tokens();
    c.fit = &a.fit_;
    c.running = a.sessions_in_use();
    out->list.push_back(c);
    out->links.push_back(&a);
  }
}

AgentLink* AgentDirectory::find(const std::string& id) {
  auto it = links_.find(id);
  return it == links_.end() ? nullptr : it->second.get();
}

void AgentDirectory::dispatched(AgentLink& a, std::uint64_t request, std::int64_t tokens,
                                std::span<const std::uint64_t> blocks, SteadyClock::time_point now) {
  ended(a, request);
  AgentLink::Dispatch& d = a.dispatches_[request];
  // Its report covers this request once the agent has admitted this many (exact with one gateway;
  // other senders' requests can make it look covered a little early).
  a.assigned_ = std::max(a.assigned_, a.admitted_) + 1;
  d = {tokens, now, a.assigned_, {blocks.begin(), blocks.end()}};
  for (std::uint64_t b : d.blocks) a.inflight_blocks_[b]++;
}

void AgentDirectory::first_byte(AgentLink& a, std::uint64_t request) {
  auto it = a.dispatches_.find(request);
  if (it != a.dispatches_.end()) it->second.tokens = 0;
}

void AgentDirectory::ended(AgentLink& a, std::uint64_t request) {
  auto it = a.dispatches_.find(request);
  if (it == a.dispatches_.end()) return;
  for (std::uint64_t b : it->second.blocks) {
    auto held = a.inflight_blocks_.find(b);
    if (held != a.inflight_blocks_.end() && --held->second <= 0) a.inflight_blocks_.erase(held);
  }
  a.dispatches_.erase(it);
  if (on_room_) on_room_();
}

void AgentDirectory::measured(AgentLink& a, const gateway::Prediction& p, double measured_s) {
  a.fit_.observe(static_cast<double>(p.uncached), static_cast<double>(p.ahead), static_cast<double>(p.running), measured_s);
}

void AgentDirectory::refused_full(AgentLink& a, SteadyClock::time_point now) {
  a.full_until_ = now + std::chrono::seconds(1);
}

void AgentDirectory::succeeded(AgentLink& a) { a.failures_ = 0; }

void AgentDirectory::failed(AgentLink& a, SteadyClock::time_point now) {
  if (++a.failures_ >= options_.breaker_failures) {
    a.open_until_ = now + options_.breaker_open;
    a.failures_ = 0;
    spdlog::warn("agent {}: {} failures in a row: breaker open for {} ms", a.id(), options_.breaker_failures,
                 options_.breaker_open.count());
  }
}

std::size_t AgentDirectory::live() const {
  return static_cast<std::size_t>(std::count_if(links_.begin(), links_.end(), [](const auto& kv) { return kv.second->live_; }));
}

std::vector<AgentDirectory::AgentSummary> AgentDirectory::summary() const {
  std::vector<AgentSummary> out;
  for (const auto& [id, link] : links_) out.push_back({id, link->live_, link->blocks_.size(), link->sessions_in_use()});
  return out;
}

std::string AgentDirectory::served_name(const std::string& model) const {
  if (model.empty()) return {};
  const std::vector<std::string> served = models();
  for (const std::string& m : served) {
    if (m == model) return m;
  }
  for (const std::string& m : served) {
    if (m == model + ".gguf") return m;
  }
  return {};
}

AgentDirectory::ModelLookup AgentDirectory::lookup(const std::string& model) const {
  if (model.empty() || !served_name(model).empty()) return ModelLookup::kServed;
  if (std::binary_search(catalog_.begin(), catalog_.end(), model)) return ModelLookup::kCatalogOnly;
  // With no agent live and no catalog, what exists is not known yet: dispatch says unavailable.
  return models().empty() && catalog_.empty() ? ModelLookup::kServed : ModelLookup::kUnknown;
}

std::size_t AgentDirectory::serving(const std::string& model, const std::string& except) const {
  std::size_t n = 0;
  for (const auto& [id, link] : links_) {
    if (!link->live_ || id == except) continue;
    for (const cluster::AgentModel& m : link->state_.models) n += m.name == model;
  }
  return n;
}

std::vector<std::string> AgentDirectory::models() const {
  std::set<std::string> names;
  for (const auto& [id, link] : links_) {
    if (!link->live_) continue;
    for (const cluster::AgentModel& m : link->state_.models) names.insert(m.name);
  }
  return {names.begin(), names.end()};
}

}  // namespace uma::gateway
