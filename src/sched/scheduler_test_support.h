// Test support for the scheduler's unit tests: a fake Decoder that is its own oracle (the next
// token is always last + 1, from any batch) and checks the scheduler's use of sequences, plus a
// fixture that drives a Scheduler and gathers each request's events. Like llama.cpp's unified KV,
// the fake holds n_ctx cells in all; a cell shared by share_prefix counts once; a decode or
// restore that does not fit fails with kKvExhausted and changes nothing.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace uma::testing_support {

constexpr Token kEos = 2;

class FakeDecoder final : public Decoder {
 public:
  // per_seq: like llama.cpp's per-sequence KV streams, each id holds n_ctx / n_seq cells of its own.
  FakeDecoder(std::int32_t n_batch, std::int32_t n_ctx, std::int32_t n_seq, bool per_seq = false)
      : n_batch_(n_batch), n_ctx_(n_ctx), n_seq_(n_seq), per_seq_(per_seq), kv_(static_cast<size_t>(n_seq)),
        cells_(static_cast<size_t>(n_seq)), live_(static_cast<size_t>(n_seq)) {}

  std::int32_t n_batch() const override { return n_batch_; }
  std::int32_t n_ubatch() const override { return n_ubatch_ > 0 ? n_ubatch_ : n_batch_; }
  void set_n_ubatch(std::int32_t n) { n_ubatch_ = n; }  // before the scheduler is made
  // Logits rows a decode may ask for (0: any); a decode asking for more fails the test.
  std::int32_t outputs_reserved() const override { return outputs_reserved_; }
  std::int32_t outputs_reserved_ = 0;
  std::int32_t n_ctx() const override { return n_ctx_; }
  std::int32_t n_seq_max() const override { return n_seq_; }
  bool kv_per_sequence() const override { return per_seq_; }
  std::int32_t n_ctx_seq() const override { return per_seq_ ? n_ctx_ / n_seq_ : n_ctx_; }
  void move_sequence(std::int32_t from, std::int32_t to) override {
    no_rows_pending("move_sequence", from);
    EXPECT_TRUE(per_seq_) << "sequences move only with per-sequence KV";
    EXPECT_TRUE(kv_[to].empty() && !live_[to]) << "move into a used sequence " << to;
    kv_[to] = std::move(kv_[from]);
    cells_[to] = std::move(cells_[from]);
    live_[to] = live_[from];
    if (sampler_.count(from)) sampler_[to] = sampler_[from];
    sampler_.erase(from);
    kv_[from].clear();
    cells_[from].clear();
    live_[from] = false;
    ++moves_;
    copy_pending_[from] |= kSource;
    copy_pending_[to] |= kDestination;
  }
  // One token per byte (offset 100) after a BOS of 1.
  Status tokenize(std::string_view text, std::vector<Token>& out, bool = false) const override {
    out = {1};
    for (unsigned char c : text) out.push_back(100 + c);
    return Status::Ok();
  }
  std::string piece(Token t) const override {
    auto it = pieces_.find(t);
    return it != pieces_.end() ? it->second : "<" + std::to_string(t) + ">";
  }
  bool is_end_of_generation(Token t) const override { return t == kEos; }
  Status start_sequence(std::int32_t seq, const SamplingParams&) override {
    if (fail_start_) {
      fail_start_ = false;
      return Status(ErrorCode::kInvalidArgument, "injected: no sampler for these parameters");
    }
    EXPECT_FALSE(live_[seq]) << "sequence " << seq << " started twice";
    EXPECT_TRUE(kv_[seq].empty()) << "sequence " << seq << " starts with stale KV";
    live_[seq] = true;
    sampler_[seq] = ++samplers_made_;
    return Status::Ok();
  }
  Status adopt_sequence(std::int32_t seq, const SamplingParams&, std::int32_t keep) override {
    no_rows_pending("adopt_sequence", seq);
    EXPECT_TRUE(per_seq_) << "a kept sequence is adopted only with per-sequence KV";
    EXPECT_FALSE(live_[seq]) << "adopting a live sequence " << seq;
    EXPECT_LE(keep, static_cast<std::int32_t>(kv_[seq].size())) << "adopting more than the sequence holds";
    trim_sequence(seq, keep);
    live_[seq] = true;
    sampler_[seq] = ++samplers_made_;
    adopted_tokens_ += keep;
    return Status::Ok();
  }
  std::int32_t adopted_tokens_ = 0;  // prefix tokens reused in place (adopt_sequence)
  std::size_t kv_state_bytes(std::int32_t seq) const override { return kv_[seq].size() * sizeof(Token); }
  void share_prefix(std::int32_t src, std::int32_t dst, std::int32_t n) override {
    no_rows_pending("share_prefix", dst);
    EXPECT_LE(n, static_cast<std::int32_t>(kv_[src].size())) << "sharing cells the source does not have";
    EXPECT_TRUE(kv_[dst].empty());
    kv_[dst].assign(kv_[src].begin(), kv_[src].begin() + n);
    cells_[dst].assign(cells_[src].begin(), cells_[src].begin() + n);
    for (std::uint64_t c : cells_[dst]) ++refs_[c];
    shared_tokens_ += n;
    if (per_seq_) {
      copy_pending_[src] |= kSource;
      copy_pending_[dst] |= kDestination;
    }
  }
  void drop_sampler(std::int32_t seq) override {
    no_rows_pending("drop_sampler", seq);
    live_[seq] = false;
  }
  void prepare_save(std::int32_t seq) override { prepared_saves_.push_back(seq); }
  Status save_kv(std::int32_t seq, HostBytes& out) const override {
    if (pending(seq, kDestination)) return Status(ErrorCode::kKvPending, "copy in pending");
    out = bytes_of(seq);
    return Status::Ok();
  }
  HostBytes bytes_of(std::int32_t seq) const {
    HostBytes b = HostBytes::heap(kv_[seq].size() * sizeof(Token));
    std::memcpy(b.data(), kv_[seq].data(), b.size());
    return b;
  }
  Status restore_kv(std::int32_t seq, std::span<const std::uint8_t> bytes) override {
    if (fail_restore_) return Status(ErrorCode::kKvExhausted, "injected");
    if (pending(seq, kSource)) return Status(ErrorCode::kKvPending, "copy out pending");
    const auto n = static_cast<std::int32_t>(bytes.size() / sizeof(Token));
    if (!room_for(seq, n)) return Status(ErrorCode::kKvExhausted, "no room to restore");
    kv_[seq].resize(static_cast<size_t>(n));
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<std::uint8_t*>(kv_[seq].data()));
    take_cells(seq, n);
    return Status::Ok();
  }
  Status park_sequence(std::int32_t seq, bool save_kv, ParkedSequence& out) override {
    no_rows_pending("park_sequence", seq);
    EXPECT_TRUE(live_[seq]) << "park of a sequence that is not live";
    if (save_kv && pending(seq, kDestination)) return Status(ErrorCode::kKvPending, "copy in pending");
    ++parks_;
    out.kv.clear();
    if (save_kv) out.kv = bytes_of(seq);
    out.sampler = std::make_shared<int>(sampler_[seq]);
    live_[seq] = false;
    kv_[seq].clear();
    release_cells(seq);
    return Status::Ok();
  }
  Status unpark_sequence(std::int32_t seq, ParkedSequence& from) override {
    no_rows_pending("unpark_sequence", seq);
    EXPECT_FALSE(live_[seq]) << "unpark into a live sequence";
    EXPECT_TRUE(from.sampler != nullptr);
    live_[seq] = true;
    sampler_[seq] = *static_cast<int*>(from.sampler.get());
    from.sampler.reset();
    if (from.kv.empty()) return Status::Ok();
    if (fail_restore_) return Status(ErrorCode::kKvExhausted, "injected");
    if (pending(seq, kSource)) return Status(ErrorCode::kKvPending, "copy out pending");
    const auto n = static_cast<std::int32_t>(from.kv.size() / sizeof(Token));
    if (!room_for(seq, n)) return Status(ErrorCode::kKvExhausted, "no room to restore");
    kv_[seq].resize(static_cast<size_t>(n));
    std::memcpy(kv_[seq].data(), from.kv.data(), from.kv.size());
    take_cells(seq, n);
    from.kv.clear();
    return Status::Ok();
  }
  void end_sequence(std::int32_t seq) override {
    no_rows_pending("end_sequence", seq);
    ++ended_;
    live_[seq] = false;
    kv_[seq].clear();
    release_cells(seq);
  }
  bool decode_is_async() const override { return async_; }
  std::int32_t threads() const override { return threads_; }
  void set_threads(std::int32_t n) override { threads_ = n; }
  bool computes_on_host() const override { return on_host_; }
  bool pads_prompt_chunks() const override { return per_seq_ && !on_host_; }  // as the runtime's default
  bool keeps_pass_graphs() const override { return pads_prompt_chunks() && keeps_graphs_; }
  void synchronize() override {
    ++syncs_;
    if (on_synchronize_) on_synchronize_();
  }
  Status decode(std::span<const BatchEntry> batch) override {
    EXPECT_EQ(rows_unsampled_, 0) << "a decode launched over the last one's unread rows";
    dead_.clear();
    ++decodes_;
    decode_threads_.push_back(threads_);
    if (on_decode_) on_decode_(batch);
    copy_pending_.clear();  // llama.cpp applies queued stream copies first
    EXPECT_LE(static_cast<std::int32_t>(batch.size()), n_batch_);
    if (outputs_reserved_ > 0) {
      EXPECT_LE(std::count_if(batch.begin(), batch.end(), [](const BatchEntry& e) { return e.logits; }), outputs_reserved_)
          << "more logits rows than the decoder reserved";
    }
    last_.clear();  // a failed decode has no rows
    sampled_.clear();
    rows_unsampled_ = 0;
    if (fail_next_) {
      fail_next_ = false;
      return Status(ErrorCode::kDecodeFailed, "injected");
    }
    if (kv_full_next_) {
      kv_full_next_ = false;
      return Status(ErrorCode::kKvExhausted, "injected");
    }
    if (!per_seq_ && cells_used() + static_cast<std::int32_t>(batch.size()) > n_ctx_) {
      ++kv_exhausted_;
      return Status(ErrorCode::kKvExhausted, "no KV cells for the batch");
    }
    std::set<std::int32_t> seqs;
    for (const BatchEntry& e : batch) seqs.insert(e.seq);
    for (std::int32_t s : seqs) {
      const auto n = std::count_if(batch.begin(), batch.end(), [&](const BatchEntry& e) { return e.seq == s; });
      if (per_seq_ && !room_for(s, static_cast<std::int32_t>(n))) {
        ++kv_exhausted_;
        return Status(ErrorCode::kKvExhausted, "no KV cells for the batch in sequence " + std::to_string(s));
      }
    }
    if (per_seq_) {
      // At best one pass for the decode rows and each chunk's first token, plus one for the rest
      // of each chunk (llama.cpp merges two only for consecutive ids with equal lengths).
      const int passes = split_equal_passes(batch);
      const auto multi = std::count_if(seqs.begin(), seqs.end(), [&](std::int32_t q) {
        return std::count_if(batch.begin(), batch.end(), [&](const BatchEntry& e) { return e.seq == q; }) > 1;
      });
      max_passes_ = std::max(max_passes_, passes);
      span_holes_ = *seqs.rbegin() - *seqs.begin() + 1 - static_cast<int>(seqs.size());
      max_excess_passes_ = std::max(max_excess_passes_, passes - 1 - static_cast<int>(multi));
    }
    last_.assign(batch.begin(), batch.end());
    for (const BatchEntry& e : batch) {
      EXPECT_TRUE(live_[e.seq]) << "decode for a sequence that was not started";
      EXPECT_EQ(e.pos, static_cast<std::int32_t>(kv_[e.seq].size())) << "positions must be contiguous (sequence " << e.seq << ", token " << e.token << ", decode " << decodes_ << ")";
      kv_[e.seq].push_back(e.token);
      take_cells(e.seq, 1);
    }
    max_cells_used_ = std::max(max_cells_used_, cells_used());
    max_batch_ = std::max(max_batch_, batch.size());
    rows_unsampled_ = static_cast<int>(std::count_if(batch.begin(), batch.end(), [](const BatchEntry& e) { return e.logits; }));
    return Status::Ok();
  }
  Token sample(std::int32_t seq, std::int32_t i) override {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, static_cast<std::int32_t>(last_.size()));
    const BatchEntry& e = last_[static_cast<size_t>(i)];
    EXPECT_TRUE(e.logits) << "sampled a row that did not ask for logits";
    EXPECT_EQ(e.seq, seq) << "logits row belongs to another sequence";
    EXPECT_FALSE(dead_.count(i)) << "sampled a row whose sequence changed after the decode";
    EXPECT_TRUE(sampled_.insert(i).second) << "row sampled twice";
    --rows_unsampled_;
    return e.token + 1 == eos_after_ ? kEos : e.token + 1;
  }
  std::int32_t kv_tokens(std::int32_t seq) const override { return static_cast<std::int32_t>(kv_[seq].size()); }
  void trim_sequence(std::int32_t seq, std::int32_t n) override {
    EXPECT_GE(n, 0);
    ++trims_;
    if (n >= static_cast<std::int32_t>(kv_[seq].size())) return;
    // The last decode's rows of the removed positions need no sampling now.
    for (std::size_t i = 0; i < last_.size(); ++i) {
      const BatchEntry& e = last_[i];
      if (e.seq == seq && e.pos >= n && e.logits && sampled_.insert(static_cast<std::int32_t>(i)).second) --rows_unsampled_;
    }
    trimmed_tokens_ += static_cast<std::int32_t>(kv_[seq].size()) - n;
    const std::size_t keep = static_cast<std::size_t>(n);
    for (std::size_t k = keep; k < cells_[seq].size(); ++k) release_cell(cells_[seq][k]);
    kv_[seq].resize(keep);
    cells_[seq].resize(std::min(cells_[seq].size(), keep));
  }
  int trims_ = 0;
  std::int32_t trimmed_tokens_ = 0;  // KV positions removed by trim_sequence

  std::int32_t total_kv() const {
    std::int32_t n = 0;
    for (const auto& k : kv_) n += static_cast<std::int32_t>(k.size());
    return n;
  }
  std::int32_t cells_used() const { return static_cast<std::int32_t>(refs_.size()); }  // distinct cells

  int decodes_ = 0;
  std::int32_t threads_ = 0;  // threads(): 0, no host pool
  bool on_host_ = false;      // computes_on_host()
  bool keeps_graphs_ = false;  // keeps_pass_graphs() where pads_prompt_chunks()
  std::vector<std::int32_t> decode_threads_;  // threads() at each decode
  bool async_ = false;  // decode_is_async(): the scheduler may pipeline
  int syncs_ = 0;
  std::function<void(std::span<const BatchEntry>)> on_decode_;  // e.g. advances a test's clock by the batch's cost
  std::function<void()> on_synchronize_;  // e.g. an asynchronous device's: the clock to where its work ends
  int moves_ = 0;
  int max_passes_ = 0;  // per-sequence KV: most ubatches (passes over the weights) one decode took
  int max_excess_passes_ = 0;
  int span_holes_ = 0;  // per-sequence KV: ids between the last decode's lowest and highest not in it
  mutable int pending_refusals_ = 0;  // save/restore refused while a stream copy was queued  // most passes one decode took beyond the best its sequences allow
  int ended_ = 0;
  size_t max_batch_ = 0;
  bool fail_next_ = false;
  bool kv_full_next_ = false;  // next decode finds no KV cells (and changes nothing)
  bool fail_restore_ = false;  // saved KV does not fit back
  bool fail_start_ = false;    // the next start_sequence fails
  int parks_ = 0;
  std::vector<std::int32_t> prepared_saves_;  // prepare_save hints, by sequence
  int kv_exhausted_ = 0;             // decodes that found no room (not injected)
  std::int32_t max_cells_used_ = 0;  // high-water mark of distinct cells
  std::int32_t shared_tokens_ = 0;  // cells shared by share_prefix
  int samplers_made_ = 0;
  std::map<std::int32_t, int> sampler_;  // which sampler chain a sequence holds
  Token eos_after_ = -1;  // when set, this token id is replaced by EOS
  std::map<Token, std::string> pieces_;  // overrides of piece()
  std::vector<BatchEntry> last_;

 private:
  // A decode's rows are all sampled before any sequence changes (Scheduler::tick's order): a
  // sequence ended, kept, moved or parked between two samples of one decode fails here.
  int rows_unsampled_ = 0;
  // Asynchronous (async_): a sequence may change while a decode holding its rows is in flight;
  // those rows are then dead, never to be sampled.
  void no_rows_pending(const char* what, std::int32_t seq) {
    if (!async_) {
      EXPECT_EQ(rows_unsampled_, 0) << what << " between the samples of one decode";
      return;
    }
    for (std::size_t i = 0; i < last_.size(); ++i) {
      const auto row = static_cast<std::int32_t>(i);
      if (last_[i].seq == seq && last_[i].logits && !sampled_.count(row) && dead_.insert(row).second) --rows_unsampled_;
    }
  }
  std::set<std::int32_t> dead_;  // rows of the last decode whose sequence changed before they were read
  // Per-sequence KV: copies between streams wait for the next decode (see Decoder::move_sequence);
  // until then a destination is not read and a source not written.
  static constexpr std::uint8_t kSource = 1, kDestination = 2;
  std::map<std::int32_t, std::uint8_t> copy_pending_;
  bool pending(std::int32_t seq, std::uint8_t role) const {
    const auto it = copy_pending_.find(seq);
    const bool refused = it != copy_pending_.end() && (it->second & role) != 0;
    if (refused) ++pending_refusals_;
    return refused;
  }

  // How llama.cpp's split_equal(sequential) cuts a batch for per-sequence KV (read in the pinned
  // llama-batch.cpp): scanning unused tokens in batch order, a ubatch takes a set of sequences
  // whose ids rise by one, then the same number of tokens from each, as many as the shortest has
  // (within n_batch). Returns how many ubatches the batch takes.
  int split_equal_passes(std::span<const BatchEntry> batch) const {
    std::vector<bool> used(batch.size(), false);
    std::size_t n_used = 0;
    int passes = 0;
    while (n_used < batch.size()) {
      std::vector<std::int32_t> set;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (used[i] || std::find(set.begin(), set.end(), batch[i].seq) != set.end()) continue;
        if (!set.empty() && batch[i].seq != set.back() + 1) continue;
        set.push_back(batch[i].seq);
      }
      std::size_t per_seq = batch.size();
      for (std::int32_t q : set) {
        per_seq = std::min<std::size_t>(per_seq, std::count_if(batch.begin(), batch.end(), [&](const BatchEntry& e) {
                                          return e.seq == q && !used[static_cast<std::size_t>(&e - batch.data())];
                                        }));
      }
      per_seq = std::clamp<std::size_t>(static_cast<std::size_t>(n_ubatch()) / set.size(), 1, per_seq);
      for (std::int32_t q : set) {
        std::size_t taken = 0;
        for (std::size_t i = 0; i < batch.size() && taken < per_seq; ++i) {
          if (!used[i] && batch[i].seq == q) {
            used[i] = true;
            ++taken;
            ++n_used;
          }
        }
      }
      ++passes;
    }
    return passes;
  }

  std::int32_t n_batch_, n_ctx_, n_seq_;
  std::int32_t n_ubatch_ = 0;  // 0: n_batch
  bool per_seq_ = false;
  bool room_for(std::int32_t seq, std::int32_t n) const {
    if (per_seq_) return static_cast<std::int32_t>(kv_[seq].size()) + n <= n_ctx_ / n_seq_;
    return cells_used() + n <= n_ctx_;
  }
  void take_cells(std::int32_t seq, std::int32_t n) {
    for (std::int32_t k = 0; k < n; ++k) {
      cells_[seq].push_back(++next_cell_);
      refs_[next_cell_] = 1;
    }
  }
  void release_cells(std::int32_t seq) {
    for (std::uint64_t c : cells_[seq]) release_cell(c);
    cells_[seq].clear();
  }
  void release_cell(std::uint64_t c) {
    if (--refs_[c] == 0) refs_.erase(c);
  }

  std::vector<std::vector<Token>> kv_;
  std::vector<std::vector<std::uint64_t>> cells_;  // cell ids per sequence (shared cells appear in several)
  std::map<std::uint64_t, int> refs_;              // cell id -> sequences holding it
  std::uint64_t next_cell_ = 0;
  std::vector<bool> live_;
  std::set<std::int32_t> sampled_;
};

struct Outcome {
  std::string text;
  std::vector<std::string> chunks;
  int done = 0;
  int errors = 0;
  FinishReason reason = FinishReason::kStop;
  ErrorCode error = ErrorCode::kOk;
  std::string param;  // the error's field at fault
  std::int32_t completion_tokens = 0;
  std::int32_t accepted_prediction = 0, rejected_prediction = 0;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void make(std::int32_t n_batch, std::int32_t n_ctx, std::int32_t n_seq, SchedulerConfig cfg = {}, bool per_seq = false) {
    cfg.slo_tbt_ms = 1e9;  // ticks take no virtual time; a test that wants a stream overdue says so
    scheduler_.reset();    // a second make(): the old scheduler goes before the decoder it uses
    decoder_ = std::make_unique<FakeDecoder>(n_batch, n_ctx, n_seq, per_seq);
    scheduler_ = std::make_unique<Scheduler>(*decoder_, metrics_, cfg, clock_);
  }
  // max_tokens 0: not asked (the scheduler's default applies).
  void submit(RequestId id, std::string prompt, std::int32_t max_tokens, std::vector<std::string> stop = {}) {
    Request r;
    r.stop = std::move(stop);
    r.id = id;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    submit(std::move(r));
  }
  void submit(Request r) {
    r.received_at = clock_.now();
    scheduler_->admit(std::move(r), events_);
    collect();
  }
  void submit_background(RequestId id, std::string prompt, std::int32_t max_tokens, std::string tenant = "") {
    Request r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.priority = Priority::kBackground;
    r.tenant = std::move(tenant);
    submit(std::move(r));
  }
  void collect() {
    for (Event& e : events_) {
      Outcome& o = out_[e.request_id];
      EXPECT_EQ(o.done + o.errors, 0) << "event after the end of request " << e.request_id;
      if (e.kind == Event::Kind::kToken) {
        o.text += e.text;
        o.chunks.push_back(e.text);
      }
      if (e.kind == Event::Kind::kDone) {
        ++o.done;
        o.reason = e.reason;
        o.completion_tokens = e.completion_tokens;
        o.accepted_prediction = e.accepted_prediction_tokens;
        o.rejected_prediction = e.rejected_prediction_tokens;
      }
      if (e.kind == Event::Kind::kError) { ++o.errors; o.error = e.error.code(); o.param = e.error.param(); }
    }
    events_.clear();
  }
  int run_until_idle(int limit = 10000) {
    int ticks = 0;
    while (scheduler_->has_work() && ticks < limit) {
      scheduler_->tick(events_);
      collect();
      ++ticks;
    }
    return ticks;
  }
  // Runs until idle; returns the ids in the order their requests ended (done or error).
  std::vector<RequestId> run_recording_finish_order(int limit = 100000) {
    std::vector<RequestId> order;
    for (int ticks = 0; scheduler_->has_work() && ticks < limit; ++ticks) {
      scheduler_->tick(events_);
      for (const Event& e : events_) {
        if (e.kind != Event::Kind::kToken) order.push_back(e.request_id);
      }
      collect();
    }
    return order;
  }
  static std::string expected(Token last, int n) {
    std::string s;
    for (int k = 1; k <= n; ++k) s += "<" + std::to_string(last + k) + ">";
    return s;
  }

  ManualClock clock_;  // the scheduler's time: moves only when a test advances it
  ServerMetrics metrics_;
  std::unique_ptr<FakeDecoder> decoder_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<Event> events_;
  std::map<RequestId, Outcome> out_;
};

}  // namespace uma::testing_support
