// Scheduler, part two: who holds a sequence and KV cells. Starting queued requests, pausing
// background sessions for interactive ones (preemption), resuming them, and recovering from a
// decode that found no KV cells. The choices themselves are policy.h's; this file carries them out.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "sched/scheduler.h"

namespace uma {

Rank Scheduler::rank_of(const Session& s, Clock::time_point now) const {
  if (!s.background()) return Rank::kUrgent;
  // Background work waits for interactive work, but only so long: past its TTFT target without a
  // first token, or paused for the whole allowance, it competes as urgent and is not paused again.
  const bool late_first_token = s.generated == 0 && ms_between(s.received_at, now) > s.slo_ttft_ms;
  double paused_ms = s.paused_ms_total;
  if (s.state == SessionState::kPaused) paused_ms += ms_between(s.paused_at, now);
  const bool paused_enough = paused_ms > config_.background_max_wait_ms;
  return late_first_token || paused_enough ? Rank::kUrgent : Rank::kRelaxed;
}

bool Scheduler::fits(const Session& s) const {
  return !free_seqs_.empty() && reserved_cells_ + s.reserved_cells + cache_.cells() <= decoder_.n_ctx();
}

void Scheduler::start_waiting() {
  const Clock::time_point now = Clock::now();
  std::vector<std::pair<Waiting, Session*>> waiting;
  for (auto& s : sessions_) {
    if (is_waiting(*s)) waiting.push_back({{rank_of(*s, now), ms_between(s->received_at, now)}, s.get()});
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const auto& a, const auto& b) { return waiting_before(a.first, b.first); });
  for (const auto& [w, s] : waiting) {
    // Kept prefixes give their sequence ids and cells back before anyone waits or is paused.
    if (free_seqs_.empty()) cache_.evict_one(free_seqs_);
    if (!fits(*s) && cache_.cells() > 0 && !free_seqs_.empty()) {
      cache_.evict(reserved_cells_ + s->reserved_cells + cache_.cells() - decoder_.n_ctx(), free_seqs_);
    }
    if (!fits(*s) && !(s->priority == Priority::kInteractive && preempt_for(*s, now))) return;  // head of line waits
    take_room(*s);
  }
}

void Scheduler::take_room(Session& s) {
  const std::int32_t seq = free_seqs_.back();
  const bool starting = s.state == SessionState::kQueued;
  if (starting) {
    if (Status st = decoder_.start_sequence(seq, s.sampling); !st.ok()) {
      spdlog::error("session {}: cannot start sequence: {}", s.id, st.to_string());
      return;
    }
    s.started_at = Clock::now();
    metrics_.queue_ms.observe(ms_between(s.received_at, s.started_at));
    s.set_state(SessionState::kPrefill);
  } else {  // kPaused: resume
    const Clock::time_point now = Clock::now();
    const std::size_t bytes = s.parked.bytes();
    const bool saved = bytes > 0;
    const Status st = decoder_.unpark_sequence(seq, s.parked);
    parked_bytes_ -= bytes;
    s.parked = {};
    if (saved && !st.ok()) {
      // The saved KV did not fit back (the sampler did): recompute instead; the output is the same.
      spdlog::warn("session {}: {}; recomputing its {} tokens", s.id, st.message(), s.n_past);
      metrics_.kv_restore_fallbacks_total++;
    }
    if (!saved || !st.ok()) {
      s.n_prefilled = 0;
      s.n_past = 0;
    }
    s.shared_prefix = 0;  // restored or recomputed cells are its own
    s.paused_ms_total += ms_between(s.paused_at, now);
    s.set_state(saved && st.ok() ? s.paused_from : SessionState::kPrefill);
    metrics_.resumed_total++;
  }
  free_seqs_.pop_back();
  s.seq = seq;
  reserved_cells_ += s.reserved_cells;
  if (starting) reuse_prefix(s);  // needs its sequence id: shared cells go into it
}

bool Scheduler::preempt_for(const Session& head, Clock::time_point now) {
  if (!config_.preemption) return false;
  std::vector<VictimCandidate> running;
  std::vector<Session*> who;
  for (auto& s : sessions_) {
    if (!is_active(*s) || !s->background()) continue;
    running.push_back({s->reserved_cells, ms_between(s->started_at, now), rank_of(*s, now) == Rank::kRelaxed});
    who.push_back(s.get());
  }
  const std::int32_t seqs_needed = free_seqs_.empty() ? 1 : 0;
  const std::int32_t cells_needed = reserved_cells_ + head.reserved_cells - decoder_.n_ctx();
  const std::vector<std::size_t> victims = choose_victims(running, seqs_needed, cells_needed);
  for (std::size_t i : victims) {
    spdlog::debug("session {}: paused for interactive session {}", who[i]->id, head.id);
    pause(*who[i], now);
  }
  return !victims.empty() && fits(head);
}

void Scheduler::pause(Session& s, Clock::time_point now) {
  ParkCost cost;
  cost.kv_tokens = s.n_past;
  cost.kv_bytes = s.n_past > 0 ? decoder_.kv_state_bytes(s.seq) : 0;
  cost.host_bytes_free = config_.park_host_bytes > parked_bytes_ ? config_.park_host_bytes - parked_bytes_ : 0;
  cost.ms_per_prefill_token = budget_.ms_per_prefill_token();
  bool save = choose_park_mode(cost, config_.park) == ParkMode::kSave;
  Status st = decoder_.park_sequence(s.seq, save, s.parked);
  if (!st.ok() && save) {
    save = false;
    st = decoder_.park_sequence(s.seq, false, s.parked);
  }
  if (!st.ok()) {
    spdlog::error("session {}: cannot pause: {}", s.id, st.to_string());
    return;
  }
  if (!save) {
    s.n_prefilled = 0;
    s.n_past = 0;
    s.shared_prefix = 0;
  }
  parked_bytes_ += s.parked.bytes();
  (save ? metrics_.preempted_saved_total : metrics_.preempted_recomputed_total)++;
  free_seqs_.push_back(s.seq);
  reserved_cells_ -= s.reserved_cells;
  s.seq = -1;
  s.paused_from = s.state;
  s.paused_at = now;
  s.preemptions++;
  s.set_state(SessionState::kPaused);
}

bool Scheduler::recover_kv_exhausted() {
  // Kept prefixes are counted by estimate; they give their cells back first.
  if (cache_.cells() > 0 && cache_.evict(static_cast<std::int32_t>(batch_.entries.size()), free_seqs_) > 0) {
    spdlog::warn("decode found no KV cells; evicted kept prefixes and retrying");
    metrics_.kv_exhausted_total++;
    return true;
  }
  // Reservations make this rare (it needs cells the cache cannot place); pause the background
  // session, else the session, that started last, and let the next tick retry without it.
  std::vector<Session*> in_batch(batch_.decoded.begin(), batch_.decoded.end());
  for (const PrefillChunk& c : batch_.prefilled) in_batch.push_back(c.session);
  if (in_batch.size() < 2) return false;
  const auto later = [](const Session* a, const Session* b) {
    if (a->background() != b->background()) return b->background();
    return a->started_at < b->started_at;
  };
  Session* victim = *std::max_element(in_batch.begin(), in_batch.end(), later);
  spdlog::warn("decode found no KV cells; pausing session {} and retrying", victim->id);
  metrics_.kv_exhausted_total++;
  pause(*victim, Clock::now());
  return victim->state == SessionState::kPaused;
}

Session* Scheduler::find_session(RequestId id) {
  for (auto& s : sessions_) {
    if (s->id == id) return s.get();
  }
  return nullptr;
}

void Scheduler::reuse_prefix(Session& s) {
  if (!cache_.enabled()) return;
  const std::span<const Token> prompt = std::span<const Token>(s.tokens).first(static_cast<std::size_t>(s.n_prompt));
  const auto live_ok = [&](RequestId id) {
    const Session* leader = id == s.id ? nullptr : find_session(id);
    return leader != nullptr && is_active(*leader) && leader->seq >= 0;
  };
  const std::int32_t cells_free = decoder_.n_ctx() - reserved_cells_ - cache_.cells();
  // At least the last prompt token is evaluated, so the first token has logits.
  const PrefixCache::Hit hit = cache_.lookup(prompt, s.n_prompt - 1, live_ok, free_seqs_, cells_free);
  std::int32_t reused = 0;
  if (hit.kind == PrefixCache::Hit::Kind::kKept) {
    decoder_.share_prefix(hit.seq, s.seq, hit.length);
    reused = hit.length;
  } else if (hit.kind == PrefixCache::Hit::Kind::kLive) {
    Session& leader = *find_session(hit.leader);
    if (leader.n_prefilled >= hit.length && leader.follow == 0) {
      decoder_.share_prefix(leader.seq, s.seq, hit.length);
      reused = hit.length;
    } else {
      s.follow = leader.id;
      s.follow_len = hit.length;
      spdlog::debug("session {}: follows session {} for {} prompt tokens", s.id, leader.id, hit.length);
    }
  }
  s.n_prefilled = s.n_past = s.shared_prefix = reused;
  if (s.follow == 0) cache_.count(s.n_prompt, reused);
  cache_.add_live(s.id, prompt);
}

void Scheduler::resolve_followers() {
  for (auto& sp : sessions_) {
    Session& s = *sp;
    if (s.follow == 0 || s.state != SessionState::kPrefill) continue;
    const Session* leader = find_session(s.follow);
    const bool alive = leader != nullptr && is_active(*leader) && leader->seq >= 0;
    if (alive && (leader->n_prefilled < s.follow_len || leader->follow != 0)) continue;  // not there yet
    std::int32_t reused = 0;
    if (alive) {
      decoder_.share_prefix(leader->seq, s.seq, s.follow_len);
      reused = s.follow_len;
    }
    s.n_prefilled = s.n_past = s.shared_prefix = reused;  // a leader gone (cancelled, paused): prefill it all
    s.follow = 0;
    cache_.count(s.n_prompt, reused);
  }
}

}  // namespace uma
