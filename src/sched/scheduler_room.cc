// Scheduler, part two: who holds a sequence and KV cells. Claims (cells granted as used), starting
// queued requests, pausing sessions when claims outgrow the cache and background ones for
// interactive ones (preemption), resuming them, and recovering from a decode that found no KV
// cells. The choices themselves are policy.h's; this file carries them out.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "sched/scheduler.h"

namespace uma {

Rank Scheduler::rank_of(const Session& s, Clock::time_point now) const {
  if (!s.background()) return Rank::kUrgent;
  // Background work waits for interactive work, but only so long: past its TTFT target without a
  // first token, paused for the whole allowance, or paused often, it competes as urgent and is no
  // longer paused for interactive work.
  const bool late_first_token = s.generated == 0 && ms_between(s.received_at, now) > s.slo_ttft_ms;
  double paused_ms = s.paused_ms_total;
  if (s.state == SessionState::kPaused) paused_ms += ms_between(s.paused_at, now);
  const bool paused_enough = paused_ms > config_.background_max_wait_ms ||
                             s.preemptions >= config_.preemptions_before_protected;
  return late_first_token || paused_enough ? Rank::kUrgent : Rank::kRelaxed;
}

std::int32_t Scheduler::claim(const Session& s) const {
  if (!config_.preemption) return s.n_prompt + s.max_tokens;  // nobody can be paused: the worst case, up front
  // Shared prefix cells are counted by their source while it holds them: a kept sequence (the
  // cache counts its cells) or a running leader (its own claim does). A follower will share its
  // leader's cells and prefills nothing of them meanwhile.
  const auto holds = [&](RequestId id) {
    const Session* x = find_session(id);
    return x != nullptr && x->seq >= 0;
  };
  // Where a session's shared cells came from (kind 0: none; 1 a leader it follows, 2 a kept
  // sequence, 3 a running session) and how many.
  struct Source {
    int kind = 0;
    std::int64_t id = 0;
    std::int32_t cells = 0;
  };
  const auto source_of = [](const Session& x) -> Source {
    if (x.follow != 0) return {1, static_cast<std::int64_t>(x.follow), x.follow_len};
    if (x.shared_prefix > 0 && x.shared_from_seq >= 0) return {2, x.shared_from_seq, x.shared_prefix};
    if (x.shared_prefix > 0 && x.shared_from_session != 0) return {3, static_cast<std::int64_t>(x.shared_from_session), x.shared_prefix};
    return {};
  };
  const Source src = source_of(s);
  std::int32_t shared = src.cells;
  const bool source_holds = src.kind == 2 ? cache_.holds(static_cast<std::int32_t>(src.id))
                                          : src.kind != 0 && holds(static_cast<RequestId>(src.id));
  if (shared > 0 && !source_holds) {
    // The source let go (evicted, ended), but the cells stay shared by every sequence that took
    // them: the oldest of those still holding a sequence counts them, the others do not (16 users
    // of one prompt whose kept entry was evicted once counted 16 copies of it).
    std::int32_t counted_by_older = 0;
    for (const auto& x : sessions_) {
      if (x.get() == &s || x->seq < 0 || x->id > s.id) continue;
      const Source other = source_of(*x);
      if (other.kind == src.kind && other.id == src.id) counted_by_older = std::max(counted_by_older, std::min(shared, other.cells));
    }
    shared = counted_by_older;
  }
  return static_cast<std::int32_t>(s.tokens.size()) - shared;
}

std::int32_t Scheduler::need(const Session& s) const {
  if (!config_.preemption) return s.n_prompt + s.max_tokens;
  const auto n = static_cast<std::int32_t>(s.tokens.size());  // the prompt (and what it generated before a pause)
  if (s.state != SessionState::kQueued) return n;  // a resumed session's cells are all its own
  // A new request whose prompt prefix is in the KV cache already (a running session's, or a kept
  // sequence) will share those cells: eight requests with one long system prompt fit as one.
  return n - reusable_now(s);
}

std::int32_t Scheduler::reusable_now(const Session& s) const {
  if (!cache_.enabled()) return 0;
  const auto live_ok = [&](RequestId id) {
    const Session* x = find_session(id);
    return x != nullptr && is_active(*x) && x->seq >= 0;
  };
  const std::span<const Token> prompt = std::span<const Token>(s.tokens).first(static_cast<std::size_t>(s.n_prompt));
  return cache_.reusable(prompt, s.n_prompt - 1, live_ok);
}

std::int32_t Scheduler::take_id() {
  SeqIdPool& ids = ledger_.ids();
  if (cache_.in_place() && !ids.empty()) {
    const std::int32_t lo = running_ids().first;
    const std::int32_t k = lo < 0 ? -1 : cache_.kept_between(lo, ids.lowest());
    if (k >= 0 && cache_.unproven(k)) cache_.evict_seq(k);  // its id is now the lowest free one
  }
  return ids.take();
}

std::pair<std::int32_t, std::int32_t> Scheduler::running_ids() const {
  std::pair<std::int32_t, std::int32_t> lo_hi{-1, -1};
  for (const auto& s : sessions_) {
    if (s->seq < 0) continue;
    if (lo_hi.first < 0 || s->seq < lo_hi.first) lo_hi.first = s->seq;
    lo_hi.second = std::max(lo_hi.second, s->seq);
  }
  return lo_hi;
}

std::int32_t Scheduler::cells_granted() const {
  if (ledger_.per_seq()) return 0;  // every id owns its cells: nothing to add up
  std::int32_t n = cache_.cells();
  for (const auto& s : sessions_) {
    if (s->seq >= 0) n += claim(*s);
  }
  return n;
}

bool Scheduler::anyone_running() const {
  return std::any_of(sessions_.begin(), sessions_.end(), [](const auto& s) { return s->seq >= 0; });
}

std::int32_t Scheduler::cells_free() const { return ledger_.cells_free(cells_granted()); }

// Per-sequence KV needs no claims added up (a free id is all a start needs): skip the work.
std::int32_t Scheduler::shortfall(const Session& s) const {
  if (ledger_.per_seq()) return ledger_.shortfall(0, 0, false);
  return ledger_.shortfall(need(s), cells_granted(), anyone_running());
}

bool Scheduler::fits(const Session& s) const {
  // Per-sequence KV: a kept stream gives its id up to a start (take_room evicts it, or adopts it).
  if (ledger_.per_seq()) return ledger_.fits(0, 0, false) || cache_.kept_in_kv() > 0;
  return ledger_.fits(need(s), cells_granted(), anyone_running());
}

void Scheduler::start_waiting(std::vector<Event>& out) {
  const Clock::time_point now = time_.now();
  std::vector<std::pair<Waiting, Session*>> waiting;
  for (auto& s : sessions_) {
    if (is_waiting(*s)) waiting.push_back({{rank_of(*s, now), ms_between(s->received_at, now)}, s.get()});
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const auto& a, const auto& b) { return waiting_before(a.first, b.first); });
  for (const auto& [w, s] : waiting) {
    // Kept prefixes give their sequence ids and cells back before anyone waits or is paused.
    if (ledger_.ids().empty() && !ledger_.per_seq()) cache_.evict_one();
    if (!ledger_.per_seq() && !fits(*s) && cache_.cells() > 0 && !ledger_.ids().empty()) {
      cache_.evict(shortfall(*s));
    }
    if (!fits(*s) && !(s->priority == Priority::kInteractive && preempt_for(*s, now))) return;  // head of line waits
    take_room(*s, out);
  }
}

void Scheduler::take_room(Session& s, std::vector<Event>& out) {
  const bool starting = s.state == SessionState::kQueued;
  // Per-sequence KV: the prefix is looked up before the id is chosen, so that a request whose
  // prefix a kept stream holds takes that stream over, nothing copied. A unified KV looks up after
  // (a host snapshot hit is restored into an id of the cache's own, besides the session's).
  PrefixCache::Hit hit;
  if (starting && cache_.in_place()) hit = find_prefix(s);
  const bool adopt = hit.kind == PrefixCache::Hit::Kind::kKept;
  if (!adopt && ledger_.ids().empty()) cache_.evict_one();  // per-sequence: a kept stream makes way (fits())
  const std::int32_t seq = adopt ? cache_.adopt(hit.seq) : take_id();
  if (starting) {
    const Status st = adopt ? decoder_.adopt_sequence(seq, s.sampling, hit.length) : decoder_.start_sequence(seq, s.sampling);
    if (!st.ok()) {
      // The id goes back; the request ends here with the decoder's reason (a sampler it could
      // not build), rather than waiting forever for a start that fails the same way.
      if (adopt) decoder_.end_sequence(seq);  // the kept prefix left the cache with its id
      ledger_.ids().give_back(seq);
      spdlog::error("session {}: cannot start sequence: {}", s.id, st.to_string());
      finish(s, SessionState::kFailed);
      metrics_.count_error(st.code());
      out.push_back(error_event(s.id, std::move(st)));
      return;
    }
    s.started_at = time_.now();
    s.start_order = ++starts_;
    metrics_.queue_ms.observe(ms_between(s.received_at, s.started_at));
    s.set_state(SessionState::kPrefill);
  } else {  // kPaused: resume
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
    s.shared_from_seq = -1;
    s.shared_from_session = 0;
    end_pause(s, time_.now());
    s.set_state(saved && st.ok() ? s.paused_from : SessionState::kPrefill);
    metrics_.resumed_total++;
  }
  s.seq = seq;
  if (starting) {
    if (!cache_.in_place()) hit = find_prefix(s);
    reuse_prefix(s, hit, adopt);  // needs its sequence id: shared cells go into it
  }
}

VictimCandidate Scheduler::victim_candidate(const Session& s, Clock::time_point now) const {
  return {claim(s), ms_between(s.started_at, now), rank_of(s, now), s.preemptions >= config_.preemptions_before_protected,
          s.start_order};
}

void Scheduler::gather_victims(Clock::time_point now, std::vector<VictimCandidate>& running, std::vector<Session*>& who) {
  for (auto& s : sessions_) {
    if (!is_active(*s)) continue;
    running.push_back(victim_candidate(*s, now));
    who.push_back(s.get());
  }
}

bool Scheduler::preempt_for(const Session& head, Clock::time_point now) {
  if (!config_.preemption) return false;
  std::vector<VictimCandidate> running;
  std::vector<Session*> who;
  for (auto& s : sessions_) {
    // Only background work still within its allowance is paused for an interactive request.
    if (!is_active(*s) || !s->background() || rank_of(*s, now) != Rank::kRelaxed) continue;
    running.push_back(victim_candidate(*s, now));
    who.push_back(s.get());
  }
  const std::int32_t seqs_needed = ledger_.ids().empty() ? 1 : 0;
  const std::vector<std::size_t> victims = choose_victims(running, seqs_needed, shortfall(head));
  for (std::size_t i : victims) {
    spdlog::debug("session {}: paused for interactive session {}", who[i]->id, head.id);
    pause(*who[i], now, PauseCause::kPriority);
  }
  return !victims.empty() && fits(head);
}

void Scheduler::make_room_for_tick(Clock::time_point now) {
  if (!config_.preemption || ledger_.per_seq()) return;  // worst cases were granted up front / cells are per id
  std::int32_t over = -cells_free();
  if (over <= 0) return;
  if (cache_.cells() > 0) {
    cache_.evict(over);
    over = -cells_free();  // an entry's cells that running sessions share stay, counted by them
  }
  if (over <= 0) return;
  std::vector<VictimCandidate> running;
  std::vector<Session*> who;
  gather_victims(now, running, who);
  // Any one session fits the context alone, so pausing all but one always makes room (should
  // estimates of shared cells run short, the decode's own recovery below takes over).
  std::vector<std::size_t> victims = choose_victims(running, 0, over);
  if (victims.size() == who.size()) victims.pop_back();  // never everyone: the last in the order runs
  for (std::size_t i : victims) {
    spdlog::debug("session {}: paused, KV full ({} cells over)", who[i]->id, over);
    pause(*who[i], now, PauseCause::kKvFull);
  }
}

void Scheduler::pause(Session& s, Clock::time_point now, PauseCause cause) {
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
  // A follower paused before its leader got there prefills its prompt itself when it resumes.
  s.follow = 0;
  s.follow_len = 0;
  parked_bytes_ += s.parked.bytes();
  (save ? metrics_.preempted_saved_total : metrics_.preempted_recomputed_total)++;
  (cause == PauseCause::kKvFull ? metrics_.preempted_kv_full_total : metrics_.preempted_priority_total)++;
  ledger_.ids().give_back(s.seq);
  if (Drafter* d = spec_.drafter()) d->forget(s.seq);
  s.seq = -1;
  s.paused_from = s.state;
  s.paused_at = now;
  s.preemptions++;
  s.set_state(SessionState::kPaused);
}

void Scheduler::end_pause(Session& s, Clock::time_point now) {
  const double ms = ms_between(s.paused_at, now);
  s.paused_ms_total += ms;
  metrics_.paused_ms.observe(ms);
}

bool Scheduler::recover_kv_exhausted() {
  metrics_.kv_exhausted_total++;
  // Kept prefixes are counted by estimate; they give their cells back first.
  if (cache_.cells() > 0 && cache_.evict(static_cast<std::int32_t>(batch_.entries.size())) > 0) {
    spdlog::warn("decode found no KV cells; evicted kept prefixes and retrying");
    return true;
  }
  // Claims make this rare (it needs shared cells counted short): pause one session by the same
  // policy as for a full cache, and let the next tick retry without it.
  const Clock::time_point now = time_.now();
  std::vector<VictimCandidate> running;
  std::vector<Session*> who;
  gather_victims(now, running, who);
  if (who.size() < 2) return false;
  const std::vector<std::size_t> victims = choose_victims(running, 1, 0);
  if (victims.empty()) return false;
  Session& victim = *who[victims.front()];
  spdlog::warn("decode found no KV cells; pausing session {} and retrying", victim.id);
  pause(victim, now, PauseCause::kKvFull);
  return victim.state == SessionState::kPaused;
}

const Session* Scheduler::find_session(RequestId id) const {
  for (const auto& s : sessions_) {
    if (s->id == id) return s.get();
  }
  return nullptr;
}

Session* Scheduler::find_session(RequestId id) {
  return const_cast<Session*>(std::as_const(*this).find_session(id));
}

PrefixCache::Hit Scheduler::find_prefix(const Session& s) {
  if (!cache_.enabled()) return {};
  const std::span<const Token> prompt = std::span<const Token>(s.tokens).first(static_cast<std::size_t>(s.n_prompt));
  cache_.note_start(prompt);
  const auto live_ok = [&](RequestId id) {
    const Session* leader = id == s.id ? nullptr : find_session(id);
    return leader != nullptr && is_active(*leader) && leader->seq >= 0;
  };
  // At least the last prompt token is evaluated, so the first token has logits.
  return cache_.lookup(prompt, s.n_prompt - 1, live_ok, cells_free());
}

void Scheduler::reuse_prefix(Session& s, const PrefixCache::Hit& hit, bool adopted) {
  if (!cache_.enabled()) return;
  const std::span<const Token> prompt = std::span<const Token>(s.tokens).first(static_cast<std::size_t>(s.n_prompt));
  std::int32_t reused = 0;
  if (adopted) {
    reused = hit.length;  // the stream it took over holds them: its own cells now
  } else if (hit.kind == PrefixCache::Hit::Kind::kHost) {
    reused = cache_.restore_into(hit, s.seq);
  } else if (hit.kind == PrefixCache::Hit::Kind::kKept) {
    decoder_.share_prefix(hit.seq, s.seq, hit.length);
    reused = hit.length;
    s.shared_from_seq = hit.seq;
  } else if (hit.kind == PrefixCache::Hit::Kind::kLive) {
    Session& leader = *find_session(hit.leader);
    leader.led++;
    if (leader.n_prefilled >= hit.length && leader.follow == 0) {
      decoder_.share_prefix(leader.seq, s.seq, hit.length);
      reused = hit.length;
      s.shared_from_session = leader.id;
    } else {
      s.follow = leader.id;
      s.follow_len = hit.length;
      spdlog::debug("session {}: follows session {} for {} prompt tokens", s.id, leader.id, hit.length);
    }
  }
  s.n_prefilled = s.n_past = reused;
  // Cells another sequence holds too (restored or taken-over cells are the session's own).
  s.shared_prefix = adopted || hit.kind == PrefixCache::Hit::Kind::kHost ? 0 : reused;
  if (s.follow == 0) {
    cache_.count(s.n_prompt, reused);
    s.cached_tokens = reused;
  }
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
      s.shared_from_session = leader->id;
    }
    s.n_prefilled = s.n_past = s.shared_prefix = reused;  // a leader gone (cancelled, paused): prefill it all
    s.follow = 0;
    cache_.count(s.n_prompt, reused);
    s.cached_tokens = reused;
  }
}

}  // namespace uma
