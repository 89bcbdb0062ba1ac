#include "tools/soak/monitor.h"

#include <dirent.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "client/uma_client.h"

namespace uma::soak {

ProcSample read_proc(int pid) {
  ProcSample s;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream status(dir + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      s.rss_kb = std::stoll(line.substr(6));
      s.alive = true;
    } else if (line.rfind("State:", 0) == 0 && line.find("zombie") != std::string::npos) {
      return ProcSample{};  // exited, not yet reaped
    }
  }
  if (!s.alive) return s;
  if (DIR* d = ::opendir((dir + "/fd").c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') s.fds++;
    }
    ::closedir(d);
  }
  return s;
}

MetricsSample fetch_metrics(const std::string& socket_path, std::chrono::milliseconds timeout) {
  MetricsSample m;
  Status st;
  std::unique_ptr<UmaClient> c = UmaClient::connect(socket_path, &st);
  if (!c) {
    m.error = st.to_string();
    return m;
  }
  WireEvent ev;
  const int ms = static_cast<int>(timeout.count());
  if (!(st = c->send_metrics_request()).ok() || !(st = c->read_event(&ev, ms)).ok()) {
    m.error = st.to_string();
    return m;
  }
  const nlohmann::json j = nlohmann::json::parse(ev.raw, nullptr, false);
  if (ev.kind != WireEvent::Kind::kMetrics || !j.is_object()) {
    m.error = "not a metrics event: " + quote(ev.raw);
    return m;
  }
  // The server closes after the metrics event: wait for it (read_event fails at the close).
  if (c->read_event(&ev, ms).ok()) {
    m.error = "an event after the metrics event";
    return m;
  }
  auto get = [&](const nlohmann::json& o, const char* key) -> std::int64_t {
    const auto it = o.find(key);
    return it != o.end() && it->is_number() ? it->get<std::int64_t>() : 0;
  };
  m.kv_tokens_used = get(j, "kv_tokens_used");
  m.kv_sequences_used = get(j, "kv_sequences_used");
  m.kv_cells_granted = get(j, "kv_cells_granted");
  m.kv_cells_total = get(j, "kv_cells_total");
  m.active_sessions = get(j, "active_sessions");
  m.queued_sessions = get(j, "queued_sessions");
  m.sessions_open = get(j, "sessions_open");
  m.connections_open = get(j, "connections_open");
  m.tokens_generated_total = get(j, "tokens_generated_total");
  m.requests_total = get(j, "requests_total");
  m.tx_drops_total = get(j, "tx_drops_total");
  m.disconnects_mid_stream_total = get(j, "disconnects_mid_stream_total");
  m.requests_cancelled_total = get(j, "requests_cancelled_total");
  m.kv_exhausted_total = get(j, "kv_exhausted_total");
  if (const auto pc = j.find("prefix_cache"); pc != j.end() && pc->is_object()) {
    m.prefix_kept_sequences = get(*pc, "kept_sequences");
    m.prefix_kept_cells = get(*pc, "kept_cells");
    m.prefix_host_snapshots = get(*pc, "host_snapshots");
    m.prefix_host_bytes = get(*pc, "host_bytes");
  }
  if (const auto e = j.find("errors_total"); e != j.end() && e->is_object()) {
    for (const auto& [kind, n] : e->items()) m.errors[kind] = n.is_number() ? n.get<std::int64_t>() : 0;
  }
  m.ok = true;
  return m;
}

void Monitor::start() {
  start_ = Clock::now();
  thread_ = std::thread([this] { run(); });
}

void Monitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<Sample> Monitor::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

bool Monitor::daemon_gone() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

void Monitor::run() {
  Clock::time_point next = Clock::now();
  while (true) {
    Sample s;
    s.t_s = std::chrono::duration<double>(Clock::now() - start_).count();
    s.proc = read_proc(pid_);  // before the metrics connection opens: it is not counted
    if (s.proc.alive) s.metrics = fetch_metrics(socket_path_, std::chrono::milliseconds(30000));
    {
      std::unique_lock<std::mutex> lock(mu_);
      samples_.push_back(std::move(s));
      if (!samples_.back().proc.alive) gone_ = true;
      next += interval_;
      // Timed wait on the stop flag: the sampling period, woken early by stop().
      if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
    }
  }
}

}  // namespace uma::soak
