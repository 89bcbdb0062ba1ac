// ModelHost (model_host.h): unloading a model and what follows its process's exit: the reaper, a
// load finished or failed, progress to the load's listeners.
#include <sys/wait.h>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "agent/model_host.h"
#include "agent/model_host_entry.h"

namespace uma::agent {

namespace asio = boost::asio;

void ModelHost::begin_unload(Entry& e, UnloadReason reason) {
  if (e.state != ModelState::kLoaded && e.state != ModelState::kStarting) return;
  e.unload_reason = reason;
  e.unload_when_idle = false;
  set_state(e, ModelState::kUnloading);
  spdlog::info("model {}: unloading ({})", e.id, unload_reason_name(reason));
  if (e.forced) {
    e.process->terminate();
  } else {
    e.process->ask_unload();
  }
}

void ModelHost::unload(const std::string& id, bool force, UnloadDone done) {
  Entry* e = find(id);
  if (e == nullptr) return done(Status(ErrorCode::kNotFound, "model '" + id + "' is not loaded here"), "");
  e->reload = false;
  switch (e->state) {
    case ModelState::kQueued:
      finish_load(*e, Status(ErrorCode::kShuttingDown, "unloaded before its load began"));
      return done({}, "unloaded");
    case ModelState::kFilling:
      e->unload_when_idle = true;  // once it serves (a fill cannot be stopped midway)
      return done({}, "draining");
    case ModelState::kStarting:
    case ModelState::kLoaded:
      if (e->state == ModelState::kLoaded && e->busy && !force) {
        e->unload_when_idle = true;
        return done({}, "draining");
      }
      e->forced = force || e->state == ModelState::kStarting;
      e->unload_waiters.push_back(std::move(done));
      return begin_unload(*e, UnloadReason::kRequest);
    case ModelState::kUnloading:
      if (force && !e->forced) {
        e->forced = true;
        e->process->terminate();
      }
      e->unload_waiters.push_back(std::move(done));
      return;
    case ModelState::kRemote:
    case ModelState::kNvme:
    case ModelState::kDram:
      break;  // the store's tiers: a model host's entries are past them
  }
}

void ModelHost::arm_reaper() {
  sigchld_.async_wait([this, alive = alive_](const boost::system::error_code& ec, int) {
    if (ec || !*alive) return;
    reap();
    arm_reaper();
  });
}

void ModelHost::reap() {
  int status = 0;
  for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
    if (standby_ && standby_->pid() == pid) {
      on_standby_exit(status);
      continue;
    }
    Entry* found = nullptr;
    for (auto& [id, e] : entries_) {
      if (e->process && e->process->pid() == pid) found = e.get();
    }
    if (found != nullptr) on_exit(*found, status);
  }
  if (stopping_ && entries_.empty() && stopped_) std::exchange(stopped_, nullptr)();
}

void ModelHost::on_exit(Entry& e, int status) {
  e.process->exited(status);
  const std::string how = ModelProcess::describe_exit(status);
  const std::string id = e.id;
  switch (e.state) {
    case ModelState::kStarting:
      finish_load(e, Status(ErrorCode::kModelLoad, "umad for '" + id + "' exited while loading (" + how + "; log " +
                                                       config_.run_dir + "/" + id + ".log)"));
      break;
    case ModelState::kUnloading: {
      const UnloadReason reason = e.unload_reason;
      if (reason == UnloadReason::kStop) break;  // the agent stopping: not an unload to count
      if (!e.forced) {
        const double secs = std::chrono::duration<double>(Clock::now() - e.state_since).count();
        stop_s_ = stop_s_ == 0 ? secs : 0.7 * stop_s_ + 0.3 * secs;
      }
      (reason == UnloadReason::kKeepAlive ? counters_.unloads_keep_alive
       : reason == UnloadReason::kRoom    ? counters_.unloads_room
                                          : counters_.unloads_request)++;
      spdlog::info("model {}: unloaded ({}, {})", id, unload_reason_name(reason), how);
      break;
    }
    default:
      counters_.crashes++;
      spdlog::warn("model {}: umad exited unasked ({}); log {}/{}.log", id, how, config_.run_dir, id);
      break;
  }
  auto it = entries_.find(id);
  if (it == entries_.end()) return pump();  // finish_load removed it
  std::unique_ptr<Entry> gone = std::move(it->second);
  entries_.erase(it);
  if (gone->holds_image) store_->release(id);  // the DRAM tier keeps it within its budget
  for (UnloadDone& d : gone->unload_waiters) d({}, "unloaded");
  if (gone->reload && !gone->waiters.empty() && !stopping_) {
    std::vector<LoadListener> waiters = std::move(gone->waiters);
    const std::int64_t keep = gone->keep_alive_ms;
    gone.reset();
    for (LoadListener& w : waiters) load(id, keep, std::move(w));
    return;
  }
  for (LoadListener& w : gone->waiters) {
    LoadUpdate u;
    u.id = id;
    u.done = true;
    u.status = Status(ErrorCode::kModelLoad, "model '" + id + "' ended (" + how + ")");
    w(u);
  }
  pump();
}

void ModelHost::finish_load(Entry& e, const Status& st) {
  LoadUpdate u;
  u.id = e.id;
  u.state = e.state;
  u.tier = e.tier;
  u.bytes = e.bytes;
  u.ready_bytes = st.ok() ? e.bytes : (e.image ? e.image->ready_bytes() : 0);
  u.seconds = std::chrono::duration<double>(Clock::now() - e.asked_at).count();
  u.done = true;
  u.status = st;
  if (st.ok()) u.http = "http://" + config_.http_host + ":" + std::to_string(e.http_port);
  std::vector<LoadListener> waiters = std::move(e.waiters);
  e.waiters.clear();
  spawn_standby();  // the one this load took, if it took it
  if (!st.ok()) {
    counters_.load_failures++;
    spdlog::warn("model {}: load failed: {}", e.id, st.to_string());
    if (e.process && e.process->running() && e.process->exit_status() < 0) {
      // Still running (a start timeout): it goes when killed; the reaper finds no entry.
      e.process.reset();
    }
    if (e.holds_image) store_->release(e.id);
    const std::string id = e.id;
    entries_.erase(id);  // `e` is gone from here on
    std::erase(queue_, id);
  }
  for (LoadListener& w : waiters) w(u);
}

void ModelHost::progress(Entry& e) {
  if (e.waiters.empty()) return;
  LoadUpdate u;
  u.id = e.id;
  u.state = e.state;
  u.tier = !e.tier.empty() ? e.tier : store_ ? std::string(store::tier_name(store_->tier(e.id))) : "file";
  u.bytes = e.bytes;
  u.ready_bytes = e.image ? e.image->ready_bytes() : 0;
  u.seconds = std::chrono::duration<double>(Clock::now() - e.asked_at).count();
  for (LoadListener& w : e.waiters) w(u);
}

}  // namespace uma::agent
