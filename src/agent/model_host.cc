#include "agent/model_host.h"
#include "agent/handover.h"
#include "agent/model_host_entry.h"

#include <sys/wait.h>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace uma::agent {

namespace asio = boost::asio;

const char* unload_reason_name(UnloadReason r) {
  switch (r) {
    case UnloadReason::kNone: return "none";
    case UnloadReason::kRoom: return "room";
    case UnloadReason::kRequest: return "request";
    case UnloadReason::kKeepAlive: return "keep_alive";
    case UnloadReason::kStop: return "stop";
  }
  return "?";
}

const StateTable<ModelState, cluster::kModelStates>& model_states() {
  using S = ModelState;
  static const StateTable<ModelState, cluster::kModelStates> table(
      "model", cluster::kModelStateNames,
      {{S::kQueued, {S::kFilling}},
       {S::kFilling, {S::kStarting}},
       {S::kStarting, {S::kLoaded, S::kUnloading}},
       {S::kLoaded, {S::kUnloading}},
       {S::kUnloading, {S::kLoaded}}});  // unloading -> loaded: the child was busy when asked
  return table;
}

ModelHost::ModelHost(asio::io_context& io, HostConfig config, store::TierStore* store, Lookup lookup)
    : io_(io), config_(std::move(config)), store_(store), lookup_(std::move(lookup)), sigchld_(io, SIGCHLD), timer_(io),
      wall_epoch_ms_(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count()) {}

ModelHost::~ModelHost() {
  *alive_ = false;
  standby_.reset();
  timer_.cancel();
  boost::system::error_code ignored;
  sigchld_.cancel(ignored);
  for (auto& [id, e] : entries_) {
    e->process.reset();  // SIGKILL to a child still running
    if (e->holds_image) store_->release(id);
  }
  for (auto& [gen, t] : fill_waits_) t.join();  // the store's stop fails what they wait for
}

void ModelHost::start() {
  arm_reaper();
  spawn_standby();
  tick();
}

void ModelHost::spawn_standby() {
  constexpr int kStandbyAttempts = 3;
  if (!config_.standby || stopping_ || standby_ || standby_failures_ >= kStandbyAttempts) return;
  const std::string log = config_.run_dir + "/standby-" + std::to_string(++standby_seq_) + ".log";
  standby_pinned_ = 0;
  Status s = ModelProcess::spawn_standby(io_, config_.umad, log, [this](const StatusLine& line) {
    if (line.event == StatusEvent::kPinned) standby_pinned_ = line.images;
    if (line.event != StatusEvent::kStandby) return;
    standby_ready_ = true;
    standby_failures_ = 0;
    asio::post(io_, [this, alive = alive_] {
      if (!*alive) return;  // not from inside the standby's own listener, which a handover replaces
      sync_standby_pins();
      pump();
    });
  }, &standby_);
  if (!s.ok()) {
    ++standby_failures_;
    spdlog::warn("cannot start a standby umad: {}", s.to_string());
  }
}

void ModelHost::sync_standby_pins() {
  if (!standby_ready() || !config_.standby_pins || store_ == nullptr) return;  // a router's models are files
  std::vector<std::shared_ptr<store::ModelImage>> images = store_->dram_images();
  if (images.size() > kMaxPinnedImages) images.resize(kMaxPinnedImages);  // the most recently used
  // The images held weakly: one freed and another made at its address is a change, not the same set.
  const auto same = [&images](const std::vector<std::weak_ptr<store::ModelImage>>& sent) {
    if (sent.size() != images.size()) return false;
    for (std::size_t i = 0; i < sent.size(); ++i) {
      if (sent[i].lock() != images[i]) return false;
    }
    return true;
  };
  if (standby_pin_set_to_ == standby_seq_ && same(standby_pin_set_)) return;
  std::vector<int> fds;
  for (const auto& image : images) fds.push_back(image->fd());
  if (Status s = standby_->send_pin_set(fds); !s.ok()) return spdlog::warn("the standby umad: {}", s.to_string());
  standby_pin_set_.assign(images.begin(), images.end());
  standby_pin_set_to_ = standby_seq_;
}

void ModelHost::on_standby_exit(int status) {
  standby_->exited(status);
  if (!standby_ready_) ++standby_failures_;
  spdlog::warn("the standby umad {} exited ({}){}", standby_->pid(), ModelProcess::describe_exit(status),
               standby_failures_ >= 3 ? ": models start without one from now on" : "");
  standby_.reset();
  standby_ready_ = false;
  spawn_standby();
}

std::int64_t ModelHost::wall_ms(Clock::time_point t) const {
  if (t == Clock::time_point{}) return 0;
  return wall_epoch_ms_ + std::chrono::duration_cast<std::chrono::milliseconds>(t - steady_epoch_).count();
}

ModelHost::Entry* ModelHost::find(const std::string& id) {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.get();
}

void ModelHost::set_state(Entry& e, ModelState to) {
  spdlog::debug("model {}: {} -> {}", e.id, model_state_name(e.state), model_state_name(to));
  move_state(model_states(), e.state, to, e.id);
  e.state_since = Clock::now();
}

void ModelHost::load(const std::string& id, std::optional<std::int64_t> keep_alive_ms, LoadListener listener) {
  LoadUpdate refused;
  refused.id = id;
  refused.done = true;
  if (stopping_) {
    refused.status = Status(ErrorCode::kShuttingDown, "the agent is stopping");
    return listener(refused);
  }
  if (Entry* e = find(id)) {
    if (keep_alive_ms) e->keep_alive_ms = *keep_alive_ms;
    if (e->state == ModelState::kLoaded) {
      e->last_used = Clock::now();
      e->unload_when_idle = false;
      e->waiters.push_back(std::move(listener));
      return finish_load(*e, {});
    }
    if (e->state == ModelState::kUnloading) e->reload = true;
    e->unload_when_idle = false;
    e->waiters.push_back(std::move(listener));
    return progress(*e);
  }
  ModelOrigin origin;
  Status looked = lookup_(id, &origin);
  if (looked.ok() && origin.file.empty() && (store_ == nullptr || !origin.source.manifest)) {
    looked = Status(ErrorCode::kInternal, "model '" + id + "' has neither a file nor a store to come from");
  }
  if (!looked.ok()) {
    refused.status = looked;
    return listener(refused);
  }
  auto e = std::make_unique<Entry>();
  e->id = id;
  e->origin = std::move(origin);
  e->bytes = e->origin.file.empty() ? e->origin.source.manifest->bytes : e->origin.bytes;
  e->keep_alive_ms = keep_alive_ms.value_or(config_.keep_alive_ms);
  e->asked_at = e->state_since = Clock::now();
  e->waiters.push_back(std::move(listener));
  if (config_.budget.bytes > 0 && e->bytes > config_.budget.bytes) {
    refused.status = Status(ErrorCode::kUnavailable, "model '" + id + "' (" + std::to_string(e->bytes >> 20) +
                                                         " MiB) is larger than this agent's whole model budget (" +
                                                         std::to_string(config_.budget.bytes >> 20) + " MiB)");
    return e->waiters.front()(refused);
  }
  Entry& ref = *e;
  entries_[id] = std::move(e);
  queue_.push_back(id);
  progress(ref);
  pump();
}

std::vector<Resident> ModelHost::residents(bool unloading_as_leaving) const {
  std::vector<Resident> out;
  for (const auto& [id, e] : entries_) {
    if (e->state == ModelState::kQueued) continue;
    if (unloading_as_leaving && e->state == ModelState::kUnloading) continue;
    Resident r;
    r.id = id;
    r.bytes = e->bytes;
    r.idle = e->state == ModelState::kLoaded && !e->busy && !e->reload;
    r.last_used_ms = std::chrono::duration_cast<std::chrono::milliseconds>(e->last_used - steady_epoch_).count();
    r.keep_alive_ms = e->keep_alive_ms;
    out.push_back(r);
  }
  return out;
}

std::uint64_t ModelHost::held_bytes() const {
  std::uint64_t held = 0;
  for (const auto& [id, e] : entries_) held += e->state == ModelState::kQueued ? 0 : e->bytes;
  return held;
}

std::uint64_t ModelHost::idle_bytes() const {
  std::uint64_t idle = 0;
  for (const Resident& r : residents(true)) idle += r.idle ? r.bytes : 0;
  return idle;
}

void ModelHost::pump() {
  // In arrival order: a later load never takes the room an earlier one waits for.
  while (!queue_.empty() && !stopping_) {
    Entry* e = find(queue_.front());
    if (e == nullptr || e->state != ModelState::kQueued) {
      queue_.pop_front();
      continue;
    }
    const Room now = make_room(residents(false), e->bytes, config_.budget);
    if (now.fits && now.unload.empty()) {
      queue_.pop_front();
      begin_fill(*e);
      continue;
    }
    // Models already leaving will give their room back; ask the fewest idle ones for the rest.
    const Room after = make_room(residents(true), e->bytes, config_.budget);
    for (const std::string& victim : after.unload) {
      if (Entry* v = find(victim)) begin_unload(*v, UnloadReason::kRoom);
    }
    return;  // waits for exits, for models to become idle, or for its queue_timeout
  }
}

void ModelHost::begin_fill(Entry& e) {
  e.fill_started = Clock::now();
  if (!e.origin.file.empty()) {  // its umad reads the file itself
    e.tier = "file";
    set_state(e, ModelState::kFilling);
    return begin_start(e);
  }
  e.from = store_->tier(e.id);
  e.tier = std::string(store::tier_name(e.from));
  Status s;
  e.image = store_->acquire(e.origin.source, &s);
  if (!e.image) return finish_load(e, s);
  e.holds_image = true;
  set_state(e, ModelState::kFilling);
  mark_overlaps(e);
  progress(e);
  const std::uint64_t gen = e.generation = next_generation_++;
  fill_waits_[gen] = std::thread([this, alive = alive_, image = e.image, id = e.id, gen] {
    const Status st = image->wait_complete();
    asio::post(io_, [this, alive, id, gen, st] {
      if (*alive) on_filled(id, gen, st);
    });
  });
}

void ModelHost::on_filled(const std::string& id, std::uint64_t generation, const Status& st) {
  if (auto t = fill_waits_.find(generation); t != fill_waits_.end()) {
    t->second.join();  // it posted this and returned
    fill_waits_.erase(t);
  }
  Entry* e = find(id);
  if (e == nullptr || e->generation != generation || e->state != ModelState::kFilling) return;
  if (!st.ok()) return finish_load(*e, st);
  begin_start(*e);
}

void ModelHost::record_start(bool took_standby, double seconds) {
  RecentStarts& r = took_standby ? standby_starts_ : fresh_starts_;
  r.seconds[r.recorded++ % r.seconds.size()] = seconds;
  std::vector<double> v(r.seconds.begin(), r.seconds.begin() + std::min(r.recorded, r.seconds.size()));
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  r.median = v[v.size() / 2];
}

double ModelHost::start_s() const {
  const double preferred = standby_ready() ? standby_starts_.median : fresh_starts_.median;
  return preferred > 0 ? preferred : std::max(standby_starts_.median, fresh_starts_.median);
}

// A fill or start beside another's shares the cores and the disk: the L term counts queues apart
// (cluster::predicted_load_s), so only phases that ran alone are what fill rates and start_s() measure.
void ModelHost::mark_overlaps(Entry& e) {
  for (auto& [id, o] : entries_) {
    if (o.get() == &e || (o->state != ModelState::kStarting && o->state != ModelState::kFilling)) continue;
    (e.state == ModelState::kStarting ? e.start_overlapped : e.fill_overlapped) = true;
    (o->state == ModelState::kStarting ? o->start_overlapped : o->fill_overlapped) = true;
  }
}

void ModelHost::begin_start(Entry& e) {
  set_state(e, ModelState::kStarting);
  mark_overlaps(e);
  e.start_began = Clock::now();
  ProcessSpec spec;
  spec.program = config_.umad;
  spec.image_fd = e.image ? e.image->fd() : -1;
  spec.log_path = config_.run_dir + "/" + e.id + ".log";
  spec.args = config_.umad_args;
  for (const char* a : {"--alias", e.id.c_str()}) spec.args.emplace_back(a);
  spec.args.insert(spec.args.end(), {"--http", config_.http_host + ":0", "--socket", config_.run_dir + "/" + e.id + ".sock"});
  if (!config_.agent_id.empty()) {
    // LOADER/MODEL: how a gateway finds a model's streams on a loader (cluster::loaded_model_agent_id).
    spec.args.insert(spec.args.end(), {"--agent-id", config_.agent_id + "/" + e.id});
    spec.args.insert(spec.args.end(), config_.cluster_args.begin(), config_.cluster_args.end());
  }
  if (!e.origin.file.empty()) {
    spec.args.insert(spec.args.end(), {"--model", e.origin.file});
  } else if (spec.image_fd < 0) {
    return finish_load(e, Status(ErrorCode::kModelLoad, "the store's image of '" + e.id + "' has no descriptor to hand over"));
  }
  const auto listener = [this, id = e.id](const StatusLine& line) { on_status(id, line); };
  Status s;
  e.took_standby = false;
  if (standby_ && standby_ready_) {
    standby_ready_ = false;
    if (s = standby_->hand_over(spec, listener); s.ok()) {
      e.process = std::move(standby_);
      e.took_standby = true;
      counters_.standby_starts++;
    } else {
      spdlog::warn("model {}: the standby umad would not take it ({}); starting one", e.id, s.to_string());
      standby_.reset();  // killed; the reaper finds no one waiting for it
    }
  }
  if (!e.process) s = ModelProcess::spawn(io_, spec, listener, &e.process);
  if (!s.ok()) return finish_load(e, s);
  spdlog::info("model {}: umad {} starting{} ({} MiB from {}, log {})", e.id, e.process->pid(),
               e.took_standby ? " (the standby)" : "", e.bytes >> 20, e.tier, spec.log_path);
  progress(e);
}

void ModelHost::on_status(const std::string& id, const StatusLine& line) {
  Entry* e = find(id);
  if (e == nullptr) return;
  if (line.event == StatusEvent::kReady && e->state == ModelState::kStarting) {
    set_state(*e, ModelState::kLoaded);
    e->http_port = line.http_port;
    e->loaded_at = e->last_used = Clock::now();
    counters_.loads++;
    const auto ewma = [](double& avg, double x) { avg = avg == 0 ? x : 0.7 * avg + 0.3 * x; };
    const double fill = e->from != store::Tier::kNone ? std::chrono::duration<double>(e->start_began - e->fill_started).count() : 0.0;
    if (e->from != store::Tier::kNone && !e->fill_overlapped) ewma(fill_rate_[static_cast<int>(e->from)], static_cast<double>(e->bytes) / std::max(fill, 1e-3));
    if (!e->start_overlapped) record_start(e->took_standby, std::chrono::duration<double>(e->loaded_at - e->start_began).count());
    spdlog::info("model {}: loaded in {:.3f} s (fill {:.3f}, start {:.3f}{}), serving at http://{}:{}", id,
                 std::chrono::duration<double>(e->loaded_at - e->asked_at).count(),
                 fill, std::chrono::duration<double>(e->loaded_at - e->start_began).count(), e->fill_overlapped || e->start_overlapped ? ", overlapped" : "",
                 config_.http_host, e->http_port);
    finish_load(*e, {});
    if (e->unload_when_idle && !e->busy) begin_unload(*e, UnloadReason::kRequest);
    return pump();
  }
  if (line.event == StatusEvent::kBusy) {
    e->busy = true;
    if (e->state == ModelState::kUnloading && !e->forced) {  // a request came first: it serves on
      counters_.unload_refusals++;
      spdlog::info("model {}: unload refused, a request is in flight", id);
      if (e->unload_reason == UnloadReason::kRequest) e->unload_when_idle = true;
      set_state(*e, ModelState::kLoaded);
      return pump();
    }
    return;
  }
  if (line.event == StatusEvent::kIdle) {
    e->busy = false;
    e->last_used = Clock::now();
    if (e->state == ModelState::kLoaded && e->unload_when_idle) begin_unload(*e, UnloadReason::kRequest);
    return pump();  // a queued load may take its room now
  }
  if (line.event == StatusEvent::kStopping) spdlog::info("model {}: umad stopping ({})", id, line.why);
}

void ModelHost::tick() {
  const auto now = Clock::now();
  const std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - steady_epoch_).count();
  sync_standby_pins();
  if (!stopping_) {
    for (const std::string& id : expired(residents(true), now_ms)) {
      if (Entry* e = find(id)) begin_unload(*e, UnloadReason::kKeepAlive);
    }
  }
  std::vector<std::string> late;
  for (auto& [id, e] : entries_) {
    if (e->state == ModelState::kQueued && now - e->state_since > config_.queue_timeout) {
      // Room that models already unloading give back has been found: wait for them to exit (a
      // umad on a GPU takes longer than a short queue timeout to free its device), up to the start
      // timeout; only room still held by models in use times out.
      const Room coming = make_room(residents(true), e->bytes, config_.budget);
      const bool waiting_for_exits = coming.fits && coming.unload.empty() && now - e->state_since <= config_.start_timeout;
      if (!waiting_for_exits) late.push_back(id);
    }
    if (e->state == ModelState::kStarting && now - e->state_since > config_.start_timeout) late.push_back(id);
  }
  for (const std::string& id : late) {
    Entry* e = find(id);
    const bool queued = e->state == ModelState::kQueued;
    finish_load(*e, Status(ErrorCode::kUnavailable,
                           queued ? "no room for '" + id + "' within " + std::to_string(config_.queue_timeout.count()) +
                                        " ms: the models holding this agent's budget are in use"
                                  : "umad for '" + id + "' did not become ready within " +
                                        std::to_string(config_.start_timeout.count()) + " ms"));
  }
  for (auto& [id, e] : entries_) {
    if (e->state == ModelState::kFilling || e->state == ModelState::kStarting || e->state == ModelState::kQueued) progress(*e);
  }
  timer_.expires_after(config_.tick);
  timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!ec && *alive) tick();
  });
}

std::vector<ModelInfo> ModelHost::models() const {
  std::vector<ModelInfo> out;
  for (const auto& [id, e] : entries_) {
    ModelInfo m;
    m.id = id;
    m.state = e->state;
    m.bytes = e->bytes;
    m.ready_bytes = e->state >= ModelState::kStarting ? e->bytes : e->image ? e->image->ready_bytes() : 0;
    m.in_use = e->busy;
    m.loaded_at_ms = wall_ms(e->loaded_at);
    m.last_used_ms = wall_ms(e->last_used);
    m.keep_alive_ms = e->keep_alive_ms;
    if (e->http_port != 0) m.http = "http://" + config_.http_host + ":" + std::to_string(e->http_port);
    m.pid = e->process ? e->process->pid() : 0;
    out.push_back(std::move(m));
  }
  return out;
}

void ModelHost::stop(std::chrono::milliseconds grace, std::function<void()> done, bool drain) {
  stopping_ = true;
  standby_.reset();
  std::vector<std::string> queued(queue_.begin(), queue_.end());
  for (const std::string& id : queued) {
    if (Entry* e = find(id)) finish_load(*e, Status(ErrorCode::kShuttingDown, "the agent is stopping"));
  }
  for (auto& [id, e] : entries_) {
    if (!e->process) continue;
    const bool serving = drain && e->state == ModelState::kLoaded;
    if (e->state == ModelState::kLoaded || e->state == ModelState::kStarting) {
      e->forced = true;
      e->unload_reason = UnloadReason::kStop;
      set_state(*e, ModelState::kUnloading);
    }
    // A serving umad drains (its streams move to other agents, or end); one still starting stops.
    if (serving) {
      e->process->drain();
    } else {
      e->process->terminate();
    }
  }
  stopped_ = std::move(done);
  // Fills still running end when the store stops; their entries have no process to wait for.
  std::vector<std::string> without;
  for (auto& [id, e] : entries_) {
    if (!e->process) without.push_back(id);
  }
  for (const std::string& id : without) finish_load(*find(id), Status(ErrorCode::kShuttingDown, "the agent is stopping"));
  if (entries_.empty()) return std::exchange(stopped_, nullptr)();
  auto timer = std::make_shared<asio::steady_timer>(io_, grace);
  timer->async_wait([this, timer, alive = alive_](const boost::system::error_code&) {
    if (!*alive) return;
    for (auto& [id, e] : entries_) {
      if (e->process) ::kill(e->process->pid(), SIGKILL);
    }
  });
}

}  // namespace uma::agent
