// Scheduler: a sampled token's way out (scheduler.h): end-of-generation and stop checks, text
// and its events, log-probabilities, completion, and a session's end (its sequence freed or kept
// as a prefix, sequence ids compacted, terminal sessions reaped).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "sched/logprobs.h"
#include "sched/scheduler.h"

namespace uma {
namespace {

Event token_event(RequestId id, std::string text, Token token) {
  Event e;
  e.request_id = id;
  e.text = std::move(text);
  e.token_id = token;
  return e;
}

}  // namespace

bool Scheduler::ends_generation(const Session& s, Token token) const {
  if (decoder_.is_end_of_generation(token)) return true;
  const auto& ids = s.sampling.stop_token_ids;
  return !ids.empty() && std::find(ids.begin(), ids.end(), token) != ids.end();
}

void Scheduler::apply_token(Session& s, Token token, Clock::time_point now, std::vector<Event>& out) {
  if (s.generated == 0) {
    s.first_token_at = now;
    const double ttft = ms_between(s.received_at, now);
    metrics_.ttft_ms_last = ttft;
    metrics_.ttft_ms.observe(ttft);
    if (ttft > s.slo_ttft_ms) metrics_.ttft_slo_miss_total++;
  } else {
    const double tbt = ms_between(s.last_emit_at, now);
    s.tbt_ms_ewma = s.generated == 1 ? tbt : 0.2 * tbt + 0.8 * s.tbt_ms_ewma;
    s.tbt_ms_max = std::max(s.tbt_ms_max, tbt);
    metrics_.inter_token_ms.observe(tbt);
    if (tbt > s.slo_tbt_ms) metrics_.tbt_slo_miss_total++;
  }
  s.last_emit_at = now;

  if (ends_generation(s, token)) {
    complete(s, FinishReason::kStop, out);
    metrics_.requests_completed_total++;
    return;
  }
  s.generated += 1;
  s.tokens.push_back(token);
  metrics_.tokens_generated_total++;
  if (emit_text(s, s.utf8.push(decoder_.piece(token)), token, out)) {
    complete(s, FinishReason::kStop, out, /*stop_matched=*/true);
    metrics_.requests_completed_total++;
  } else if (s.generated >= s.max_tokens) {
    complete(s, FinishReason::kLength, out);
    metrics_.requests_completed_total++;
  }
}

// Read from the row the sampler just used (valid until the next decode); the entry waits in the
// session until an event carries its token's text.
void Scheduler::note_logprobs(Session& s, std::int32_t batch_index, Token token) {
  if (ends_generation(s, token)) return;  // ends the text; reported by no one
  LogprobEntry e = logprob_entry(decoder_.logits(batch_index), token, std::min(s.sampling.logprobs, kMaxTopLogprobs));
  e.chosen.text = decoder_.piece(token);
  for (TokenLogprob& t : e.top) t.text = decoder_.piece(t.token);
  s.pending_logprobs.push_back(std::move(e));
}

// A front end may say how long the prompt was before the answer ends (Anthropic's message_start).
void Scheduler::tell_prompt(Session& s, Event& first) {
  if (s.prompt_told) return;
  s.prompt_told = true;
  first.prompt_tokens = s.n_prompt;
  first.cached_tokens = s.cached_tokens;
}

bool Scheduler::emit_text(Session& s, std::string_view text, Token token, std::vector<Event>& out) {
  if (text.empty()) return false;
  bool matched = false;
  std::string safe = s.stop.push(text, &matched);
  if (!safe.empty()) {
    out.push_back(token_event(s.id, std::move(safe), token));
    tell_prompt(s, out.back());
    out.back().logprobs = std::move(s.pending_logprobs);  // the tokens whose text this releases
    s.pending_logprobs.clear();
  }
  if (matched) s.pending_logprobs.clear();  // nothing released: the stop string's tokens go unreported
  return matched;
}

void Scheduler::complete(Session& s, FinishReason reason, std::vector<Event>& out, bool stop_matched) {
  if (!stop_matched) {
    // A code point left incomplete, then whatever the stop filter held back, are text after all,
    // unless the tail itself completes a stop string.
    if (emit_text(s, s.utf8.finish(), -1, out)) {
      if (reason != FinishReason::kCancelled) reason = FinishReason::kStop;
    } else if (std::string held = s.stop.flush(); !held.empty()) {
      out.push_back(token_event(s.id, std::move(held), -1));
      tell_prompt(s, out.back());
      out.back().logprobs = std::move(s.pending_logprobs);
      s.pending_logprobs.clear();
    }
  }
  const Clock::time_point now = time_.now();
  Event done;
  done.request_id = s.id;
  done.kind = Event::Kind::kDone;
  done.reason = reason;
  if (stop_matched) done.stop_word = s.stop.matched();
  done.prompt_tokens = s.n_prompt;
  done.completion_tokens = s.generated;
  done.cached_tokens = s.cached_tokens;
  done.queue_ms = ms_between(s.received_at, s.state == SessionState::kQueued ? now : s.started_at);
  done.ttft_ms = s.generated > 0 ? ms_between(s.received_at, s.first_token_at) : -1.0;
  done.total_ms = ms_between(s.received_at, now);
  done.bytes_per_token = s.generated > 0 ? s.bytes_moved / s.generated : 0.0;
  done.accepted_prediction_tokens = s.prediction_accepted;
  done.rejected_prediction_tokens = s.prediction_rejected;
  if (s.generated > 0) metrics_.bytes_per_token_last = done.bytes_per_token;
  done.logprobs = std::move(s.pending_logprobs);  // tokens whose text never completed (a cut code point)
  s.pending_logprobs.clear();
  out.push_back(std::move(done));
  finish(s, reason == FinishReason::kCancelled ? SessionState::kCancelled : SessionState::kFinished);
}

void Scheduler::finish(Session& s, SessionState terminal) {
  if (s.state == SessionState::kPaused) {
    end_pause(s, time_.now());
    parked_bytes_ -= s.parked.bytes();
    s.parked = {};  // frees the parked sampler
  }
  s.set_state(terminal);
  cache_.remove_live(s.id);
  if (s.seq >= 0) {
    // A draft accepted past the token that ended the request is still in KV.
    // So is a pipelined decode's row (a stop string matched, a cancellation).
    if (s.speculated || s.in_flight) decoder_.trim_sequence(s.seq, s.n_past);
    if (Drafter* d = spec_.drafter()) d->forget(s.seq);
    // A sequence that ended well keeps its KV for later prompts with the same prefix, unless (per-
    // sequence KV) it would be a gap between running ones that nothing has reused yet: under churn
    // such streams were moved or dropped soon after, and the moves cost a GPU its throughput.
    const std::span<const Token> held = std::span<const Token>(s.tokens).first(static_cast<std::size_t>(s.n_past));
    const bool gap = cache_.in_place() && s.led == 0 && cache_.unseen(held) && between_running(s);
    const bool kept = terminal != SessionState::kFailed && !gap && cache_.keep(s.seq, held, s.shared_prefix, s.led);
    // Kept, the sequence stays where it is and its id goes with it to the cache.
    if (!kept) {
      decoder_.end_sequence(s.seq);
      ledger_.ids().give_back(s.seq);
    }
    s.seq = -1;
  }
}

bool Scheduler::between_running(const Session& s) const {
  bool below = false, above = false;
  for (const auto& o : sessions_) {
    if (o.get() == &s || o->seq < 0) continue;
    below |= o->seq < s.seq;
    above |= o->seq > s.seq;
  }
  return below && above;
}

void Scheduler::compact_sequences() {
  if (!ledger_.per_seq()) return;
  SeqIdPool& ids = ledger_.ids();
  // A hole in the running ids: a free id below the top one, or a kept stream between two running
  // ones that a free id above them could take (the next arrival never takes a kept stream's id,
  // so that gap would stay as long as the entry does).
  const auto kept_hole = [&](std::pair<std::int32_t, std::int32_t> b) {
    return ids.empty() || ids.highest() < b.second ? -1 : cache_.kept_between(b.first, b.second);
  };
  const auto b0 = running_ids();
  const bool gap = (!ids.empty() && ids.lowest() < b0.second) || kept_hole(b0) >= 0;
  gap_ticks_ = gap ? gap_ticks_ + 1 : 0;
  if (gap_ticks_ < config_.compact_after_ticks) return;
  gap_ticks_ = 0;
  // Every move of one compaction lands in the same decode: llama.cpp copies the streams and builds
  // its graph anew once for all of them.
  for (;;) {
    const auto b = running_ids();
    if (b.second < 0 || ids.empty()) return;
    if (const std::int32_t k = kept_hole(b); k >= 0 && cache_.unproven(k)) {
      cache_.evict_seq(k);  // nothing reused it: dropped, not copied; its id is the hole to fill
      continue;
    }
    if (const std::int32_t k = kept_hole(b); k >= 0 && ids.lowest() > b.second) {
      // The kept stream goes above the running ones (a copy); its id is then the hole to fill.
      move_holder(k, ids.take_highest());
      ids.give_back(k);
      continue;
    }
    if (ids.lowest() > b.second) return;
    move_holder(b.second, ids.take());
    ids.give_back(b.second);
  }
}

void Scheduler::move_holder(std::int32_t from, std::int32_t to) {
  decoder_.move_sequence(from, to);
  if (cache_.holds(from)) {
    cache_.relocate(from, to);
  } else if (Session* s = session_at(from)) {
    if (Drafter* d = spec_.drafter()) d->forget(from);
    s->seq = to;
  }
  metrics_.kv_sequence_moves_total++;
}

Session* Scheduler::session_at(std::int32_t seq) const {
  for (const auto& s : sessions_) {
    if (s->seq == seq) return s.get();
  }
  return nullptr;
}

// Per-sequence KV where the runtime pads prompt chunks (a GPU): prompts that start together go in
// at consecutive ids, where their chunks are padded to one length and share passes instead
// of a pass each (three 128-token prompts beside 64 streams: four passes, every stream's worst
// gap). Only prompts with nothing in KV yet are placed: one swaps ids with what holds a slot of the
// window (a decoding stream or a kept prefix moves into its id, a stream copy; a free id is taken)
// and starts afresh there.
void Scheduler::group_prompt_ids(std::vector<Event>& out) {
  if (!ledger_.per_seq() || !decoder_.pads_prompt_chunks() || inflight_) return;
  SeqIdPool& ids = ledger_.ids();
  std::vector<Session*> blank;
  for (auto& s : sessions_) {
    if (s->seq >= 0 && s->state == SessionState::kPrefill && s->n_prefilled == 0 && s->shared_prefix == 0 &&
        s->follow == 0 && s->led == 0 && ids.owns(s->seq)) {
      blank.push_back(s.get());
    }
  }
  // Where kept graphs replay prompt passes, a pass's ids are part of its shape: prompts go to the
  // lowest ids (one alone too), so that the same number of chunks of one length recurs there.
  const bool lowest = decoder_.keeps_pass_graphs();
  if (blank.size() < (lowest ? 1u : 2u)) return;
  std::sort(blank.begin(), blank.end(), [](const Session* a, const Session* b) { return a->seq < b->seq; });
  const auto n = static_cast<std::int32_t>(blank.size());
  const auto is_blank = [&](std::int32_t id) {
    return std::any_of(blank.begin(), blank.end(), [&](const Session* s) { return s->seq == id; });
  };
  // A slot can be had if it is free, a kept prefix's, or a decoding stream's.
  const auto movable = [&](std::int32_t id) {
    if (!ids.owns(id)) return false;
    if (ids.is_free(id) || is_blank(id) || cache_.holds(id)) return true;
    const Session* h = session_at(id);
    return h != nullptr && h->state == SessionState::kDecode;
  };
  // The window [w, w + n) that costs the fewest stream copies (slots neither free nor theirs),
  // every slot movable; none when they are consecutive already.
  std::int32_t best = -1, best_copies = n;
  if (lowest) {
    bool ok = true, theirs = true;
    for (std::int32_t id = 0; ok && id < n; ++id) ok = movable(id), theirs = theirs && is_blank(id);
    if (ok && theirs) return;
    if (ok) best = 0;
  }
  if (best < 0) {
    for (const Session* a : blank) {
      for (const std::int32_t w : {a->seq, a->seq - n + 1}) {
        std::int32_t copies = 0, theirs = 0;
        bool ok = w >= 0;
        for (std::int32_t id = w; ok && id < w + n; ++id) {
          ok = movable(id);
          theirs += is_blank(id) ? 1 : 0;
          copies += is_blank(id) || ids.is_free(id) ? 0 : 1;
        }
        if (ok && theirs == n) return;
        if (ok && (best < 0 || copies < best_copies)) best = w, best_copies = copies;
      }
    }
  }
  if (best < 0) return;
  std::vector<Session*> outside;
  for (Session* s : blank) {
    if (s->seq < best || s->seq >= best + n) outside.push_back(s);
  }
  for (std::int32_t slot = best; slot < best + n; ++slot) {
    if (is_blank(slot)) continue;
    Session* q = outside.back();
    outside.pop_back();
    const std::int32_t from = q->seq;
    decoder_.end_sequence(from);  // nothing in it yet: it starts again at the slot
    if (ids.is_free(slot)) {
      ids.give_back(from);
      ids.take(slot);
    } else {
      move_holder(slot, from);  // what held the slot moves into q's id
    }
    q->seq = slot;
    if (const Status st = decoder_.start_sequence(slot, q->sampling); !st.ok()) {
      spdlog::error("session {}: cannot start sequence: {}", q->id, st.to_string());
      finish(*q, SessionState::kFailed);
      metrics_.count_error(st.code());
      out.push_back(error_event(q->id, st));
    }
  }
}

void Scheduler::reap() {
  std::erase_if(sessions_, [](const auto& s) { return is_terminal(*s); });
}

}  // namespace uma
