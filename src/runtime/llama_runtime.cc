#include "runtime/llama_runtime.h"

#include "runtime/argmax.h"
#include "runtime/context_size.h"
#include "runtime/device_greedy.h"
#include "runtime/embedder.h"
#include "runtime/image_loader.h"
#include "runtime/sampler_chain.h"
#include "runtime/vocab_model.h"

#include <ggml-backend.h>
#include <llama.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace uma {

LlamaRuntime::~LlamaRuntime() {
  embedder_.reset();  // its context uses the model
  for (llama_sampler* s : samplers_) {
    if (s != nullptr) llama_sampler_free(s);
  }
  if (ctx_ != nullptr) llama_free(ctx_);
  for (llama_sampler* s : backend_greedy_) llama_sampler_free(s);  // after the context that uses them
  for (llama_sampler* s : retired_) llama_sampler_free(s);
  if (model_ != nullptr) llama_model_free(model_);
}

Status LlamaRuntime::tokenize(std::string_view text, std::vector<Token>& out, bool parse_special) const {
  return tokenize_text(vocab_, text, out, parse_special);
}

bool LlamaRuntime::valid_token(Token token) const { return token >= 0 && token < llama_vocab_n_tokens(vocab_); }

std::string LlamaRuntime::piece(Token token) const {
  char buf[128];
  int32_t n = llama_token_to_piece(vocab_, token, buf, sizeof buf, 0, /*special=*/false);
  if (n >= 0) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab_, token, big.data(), static_cast<int32_t>(big.size()), 0, false);
  big.resize(static_cast<size_t>(std::max(0, n)));
  return big;
}

bool LlamaRuntime::is_end_of_generation(Token token) const { return llama_vocab_is_eog(vocab_, token); }

Status LlamaRuntime::start_sequence(std::int32_t seq, const SamplingParams& params) {
  if (seq < 0 || seq >= n_seq_max_) return Status(ErrorCode::kInternal, "sequence id out of range");
  end_sequence(seq);  // a sequence starts empty, whatever came before
  llama_sampler* chain = make_sampler_chain(params, vocab_);
  if (chain == nullptr) return Status(ErrorCode::kBadRequest, "the grammar does not parse", "grammar");
  set_chain(seq, chain);
  return Status::Ok();
}

Status LlamaRuntime::adopt_sequence(std::int32_t seq, const SamplingParams& params, std::int32_t keep) {
  if (seq < 0 || seq >= n_seq_max_) return Status(ErrorCode::kInternal, "sequence id out of range");
  llama_sampler* chain = make_sampler_chain(params, vocab_);
  if (chain == nullptr) return Status(ErrorCode::kBadRequest, "the grammar does not parse", "grammar");
  drop_sampler(seq);
  llama_memory_seq_rm(llama_get_memory(ctx_), seq, keep, -1);
  set_chain(seq, chain);
  return Status::Ok();
}

void LlamaRuntime::set_chain(std::int32_t seq, llama_sampler* chain) {
  const auto s = static_cast<size_t>(seq);
  samplers_[s] = chain;
  greedy_[s] = chain != nullptr && greedy_only(chain);
  const bool ignore_end = chain != nullptr && s < device_share_.ignore_end.size() && device_share_.can_mask() && greedy_ignoring_end(chain);
  if (s < device_share_.ignore_end.size() && device_share_.ignore_end[s] != (ignore_end ? 1 : 0)) {
    device_share_.ignore_end[s] = ignore_end ? 1 : 0;
    // A graph writes its rows' end amounts only while it is the last one built (device_greedy.h):
    // kept graphs are dropped, to be built again with the new flag.
    if (graphs_kept_ > 0) llama_set_graphs_kept(ctx_, graphs_kept_);
  }
  device_pick_[s] = greedy_[s] || ignore_end;
  if (chain != nullptr) attach_backend_sampler(seq, device_pick_[s]);
}

void LlamaRuntime::attach_backend_sampler(std::int32_t seq, bool greedy) {
  if (static_cast<std::size_t>(seq) >= attached_.size() || attached_[static_cast<size_t>(seq)] == greedy) return;
  // Detaching brings this sequence's logits rows back to the host; both take effect at the next
  // decode, which re-reserves llama.cpp's graphs first (so switch only when the kind changes).
  llama_sampler*& chain = backend_greedy_[static_cast<size_t>(seq)];
  if (greedy) {
    // A chain is set up for the device once (llama.cpp asserts it): a fresh one each attach. The
    // one it replaces may still be named by the last graph until the next decode re-reserves.
    retired_.push_back(chain);
    chain = make_device_greedy(&device_share_, seq);
  }
  // llama.cpp may refuse a device sampler (a tensor-split model): that id samples on the host.
  const bool ok = llama_set_sampler(ctx_, seq, greedy ? chain : nullptr);
  attached_[static_cast<size_t>(seq)] = greedy && ok;
  ++sampler_switches_;
}

void LlamaRuntime::end_sequence(std::int32_t seq) {
  if (seq < 0 || seq >= n_seq_max_) return;
  llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  llama_sampler*& s = samplers_[static_cast<size_t>(seq)];
  if (s != nullptr) llama_sampler_free(s);
  s = nullptr;
}

namespace {
std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double ms_of(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }
}  // namespace

std::string LlamaRuntime::describe_decode(const llama_batch& b, std::size_t n_tokens) {
  // Its shape (prompt chunks, sequences), whether llama.cpp reused its last graph, and the sampler
  // switches since the last call (each a graph re-reserve).
  std::map<std::int32_t, std::int32_t> per_seq;
  for (std::size_t i = 0; i < n_tokens; ++i) ++per_seq[b.seq_id[i][0]];
  std::int32_t longest = 0;
  for (const auto& [seq, n] : per_seq) longest = std::max(longest, n);
  const llama_perf_context_data perf = llama_perf_context(ctx_);
  return fmt::format("{} tokens, {} sequences, longest run {}, graph reused {}, sampler switches {}, fillers {}, padding {}, "
                     "passes {}", n_tokens, per_seq.size(), longest, perf.n_reused > timing_.reused_before ? "yes" : "no",
                     sampler_switches_ - timing_.switches_before, arrange_ ? arranged_.fillers.size() : 0,
                     arrange_ ? arranged_.pad_entries : 0, arrange_ ? llama_passes(arranged_.entries, n_ubatch_).size() : 0);
}

void LlamaRuntime::note_decode_shape() {
  timing_.reused_before = llama_perf_context(ctx_).n_reused;
  timing_.switches_before = sampler_switches_;
}

std::int32_t LlamaRuntime::timed_decode(const llama_batch& b, std::size_t n_tokens) {
  const std::int64_t t0 = steady_ns();
  const int32_t rc = llama_decode(ctx_, b);
  const std::int64_t t1 = steady_ns();
  if (timing_.mode == DecodeTiming::Mode::kPipelined) {  // synchronize() times the rest
    timing_.pending = true;
    timing_.launch_start_ns = t0;
    timing_.launch_end_ns = t1;
    timing_.pending_tokens = n_tokens;
    return rc;
  }
  llama_synchronize(ctx_);
  const std::int64_t t2 = steady_ns();
  if (timing_.prev_done_ns != 0) {
    const double launch_ms = ms_of(t1 - t0);
    const double device_ms = ms_of(t2 - t1);
    if ((launch_ms > 5.0 || device_ms > 40.0) && timing_.slow_logged < 400) {
      ++timing_.slow_logged;
      spdlog::info("slow decode: launch {:.2f} ms, device {:.2f} ms: {}", launch_ms, device_ms, describe_decode(b, n_tokens));
    }
    timing_.gap_ms.push_back(ms_of(t0 - timing_.prev_done_ns));
    timing_.launch_ms.push_back(launch_ms);
    timing_.wait_ms.push_back(device_ms);
    timing_.tokens.push_back(static_cast<double>(n_tokens));
    timing_.sample_ms.push_back(ms_of(timing_.sample_ns));
    if (timing_.gap_ms.size() >= 100) report_timing();
  }
  timing_.prev_done_ns = t2;
  timing_.sample_ns = 0;
  note_decode_shape();
  return rc;
}

std::int32_t LlamaRuntime::filler_pos(std::int32_t seq) const {
  if ((copy_pending_[static_cast<size_t>(seq)] & kCopyDestination) != 0) return -1;  // its cells are not known yet
  const std::int32_t pos = llama_memory_seq_pos_max(llama_get_memory(ctx_), seq) + 1;
  return pos < n_ctx_seq_ ? pos : -1;
}

std::int32_t LlamaRuntime::row_of(std::int32_t batch_index) const {
  if (!token_index_of_.empty()) {  // the last decode had images: its token entries went apart
    if (batch_index < 0 || static_cast<std::size_t>(batch_index) >= token_index_of_.size()) return -1;
    batch_index = token_index_of_[static_cast<std::size_t>(batch_index)];
    if (batch_index < 0) return -1;
  }
  if (!arrange_) return batch_index;
  if (batch_index < 0 || static_cast<std::size_t>(batch_index) >= arranged_.index_of.size()) return -1;
  return arranged_.index_of[static_cast<std::size_t>(batch_index)];
}

Status LlamaRuntime::decode(std::span<const BatchEntry> caller_batch) {
  if (caller_batch.empty()) return Status::Ok();
  if (static_cast<std::int32_t>(caller_batch.size()) > n_batch_) return Status(ErrorCode::kInternal, "batch over n_batch");
  token_index_of_.clear();
  held_.clear();
  const bool images = std::any_of(caller_batch.begin(), caller_batch.end(), [](const BatchEntry& e) { return e.embd != nullptr; });
  return images ? decode_images(caller_batch) : decode_tokens(caller_batch);
}

llama_batch LlamaRuntime::batch_view(std::int32_t n_tokens) {
  llama_batch b{};
  b.n_tokens = n_tokens;
  b.pos = batch_pos_.data();
  b.n_seq_id = batch_nseq_.data();
  b.seq_id = batch_seq_ptr_.data();
  b.logits = batch_logits_.data();
  return b;
}

Status LlamaRuntime::decode_tokens(std::span<const BatchEntry> caller_batch) {
  std::span<const BatchEntry> batch = caller_batch;
  if (arrange_) {
    arrange_for_streams(caller_batch, stream_options_, arranged_);
    batch = arranged_.entries;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    batch_token_[i] = batch[i].token;
    batch_pos_[i] = batch[i].pos;
    batch_seq_[i] = batch[i].seq;
    batch_logits_[i] = batch[i].logits ? 1 : 0;
  }
  llama_batch b = batch_view(static_cast<int32_t>(batch.size()));
  b.token = batch_token_.data();
  ++device_share_.decodes;  // the device samplers' inputs are this decode's
  const int32_t rc = timing_.on() ? timed_decode(b, batch.size()) : llama_decode(ctx_, b);
  if (arrange_) {
    // The fillers' cells go again (on the host only: the next graph's mask no longer sees them).
    llama_memory_t mem = llama_get_memory(ctx_);
    for (const StreamFiller& f : arranged_.fillers) llama_memory_seq_rm(mem, f.seq, f.pos, -1);
    for (const StreamFiller& f : arranged_.pads) llama_memory_seq_rm(mem, f.seq, f.pos, -1);
    fillers_total_ += arranged_.fillers.size();
    pad_entries_total_ += static_cast<std::uint64_t>(arranged_.pad_entries);
    if (arranged_.deep_seq >= 0) ++deep_passes_total_;
  }
  // llama_decode applies queued stream copies before it looks for cells (0) or finds none (1).
  if (rc == 0 || rc == 1) std::fill(copy_pending_.begin(), copy_pending_.end(), 0);
  // Retired chains are named by no graph now: a decode that got this far re-reserved without them,
  // and one that failed earlier left the reserve pending, which drops the old graphs first.
  for (llama_sampler* s : retired_) llama_sampler_free(s);
  retired_.clear();
  if (rc == 0) return Status::Ok();
  if (rc == 1) return Status(ErrorCode::kKvExhausted, "no KV cells for the batch");
  return Status(ErrorCode::kDecodeFailed, "llama_decode returned " + std::to_string(rc));
}

void LlamaRuntime::synchronize() {
  if (!timing_.pending) {
    llama_synchronize(ctx_);
    return;
  }
  const std::int64_t t2 = steady_ns();
  llama_synchronize(ctx_);
  const std::int64_t t3 = steady_ns();
  timing_.pending = false;
  if (timing_.prev_done_ns != 0) {
    const double launch_ms = ms_of(timing_.launch_end_ns - timing_.launch_start_ns);
    const double until_ms = ms_of(t2 - timing_.launch_end_ns);  // host work between launch and need
    const double wait_ms = ms_of(t3 - t2);
    const double period_ms = ms_of(t3 - timing_.prev_done_ns);  // since the last results
    const double before_ms = ms_of(timing_.launch_start_ns - timing_.prev_done_ns);  // negative: launched ahead
    const bool idle = before_ms > 50.0;  // nothing to run, not a slow tick
    if ((launch_ms > 5.0 || period_ms > 10.0) && !idle && timing_.slow_logged < 400) {
      ++timing_.slow_logged;
      // No decode ran since this one: its batch and llama.cpp's counts are still its own.
      const llama_batch b = batch_view(static_cast<std::int32_t>(timing_.pending_tokens));
      spdlog::info("slow tick: period {:.2f} ms: host before launch {:.2f}, launch {:.2f}, host until needed {:.2f}, wait "
                   "{:.2f}: {}", period_ms, before_ms, launch_ms, until_ms, wait_ms,
                   describe_decode(b, timing_.pending_tokens));
    }
    timing_.launch_ms.push_back(launch_ms);
    timing_.gap_ms.push_back(until_ms);
    timing_.wait_ms.push_back(wait_ms);
    timing_.period_ms.push_back(period_ms);
    timing_.tokens.push_back(static_cast<double>(timing_.pending_tokens));
    timing_.sample_ms.push_back(ms_of(timing_.sample_ns));
    if (timing_.gap_ms.size() >= 100) report_timing();
  }
  timing_.prev_done_ns = t3;
  timing_.sample_ns = 0;
  note_decode_shape();
}

void LlamaRuntime::report_timing() {
  const auto pct = [](std::vector<double>& v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  const llama_perf_context_data perf = llama_perf_context(ctx_);
  if (timing_.mode == DecodeTiming::Mode::kPipelined) {
    spdlog::info("decode timing (pipelined), {} calls: tokens p50 {:.0f}; launch ms p50 {:.2f} p90 {:.2f}; host until "
                 "needed p50 {:.2f} p90 {:.2f}; wait p50 {:.2f} p90 {:.2f}; period p50 {:.2f} p90 {:.2f} p99 {:.2f}; graphs "
                 "reused so far {}", timing_.gap_ms.size(), pct(timing_.tokens, 0.5), pct(timing_.launch_ms, 0.5),
                 pct(timing_.launch_ms, 0.9), pct(timing_.gap_ms, 0.5), pct(timing_.gap_ms, 0.9), pct(timing_.wait_ms, 0.5),
                 pct(timing_.wait_ms, 0.9), pct(timing_.period_ms, 0.5), pct(timing_.period_ms, 0.9),
                 pct(timing_.period_ms, 0.99), perf.n_reused);
  } else {
    spdlog::info("decode timing, {} calls: tokens p50 {:.0f}; launch ms p50 {:.2f} p90 {:.2f}; device wait ms p50 {:.2f} "
                 "p90 {:.2f}; host gap ms p50 {:.2f} p90 {:.2f} (sampling p50 {:.2f}); graphs reused so far {}",
                 timing_.gap_ms.size(), pct(timing_.tokens, 0.5), pct(timing_.launch_ms, 0.5), pct(timing_.launch_ms, 0.9),
                 pct(timing_.wait_ms, 0.5), pct(timing_.wait_ms, 0.9), pct(timing_.gap_ms, 0.5), pct(timing_.gap_ms, 0.9),
                 pct(timing_.sample_ms, 0.5), perf.n_reused);
  }
  timing_.launch_ms.clear();
  timing_.period_ms.clear();
  timing_.wait_ms.clear();
  timing_.gap_ms.clear();
  timing_.tokens.clear();
  timing_.sample_ms.clear();
}

Token LlamaRuntime::sample(std::int32_t seq, std::int32_t batch_index) {
  if (!timing_.on()) return sample_row(seq, batch_index);
  const auto t0 = std::chrono::steady_clock::now();
  const Token t = sample_row(seq, batch_index);
  timing_.sample_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

Token LlamaRuntime::sample_row(std::int32_t seq, std::int32_t caller_index) {
  if (const HeldRow* held = held_row(caller_index)) return sample_held(seq, *held);
  const auto s = static_cast<size_t>(seq);
  const std::int32_t batch_index = row_of(caller_index);
  if (batch_index < 0) {  // not an entry of the last decode (llama.cpp would read -1 as its last row)
    spdlog::error("sample: sequence {} asked for entry {}, not in the last decode; ending it", seq, caller_index);
    return llama_vocab_eos(vocab_);
  }
  if (device_pick_[s] && s < attached_.size() && attached_[s]) {
    // Picked on the device, in the decode's graph: the token id is all that came back. A row the
    // device sampler left to the host (device_greedy.h) has its logits here instead.
    const llama_token t = llama_get_sampled_token_ith(ctx_, batch_index);
    if (t != LLAMA_TOKEN_NULL) return t;
    if (llama_get_sampled_logits_ith(ctx_, batch_index) == nullptr) {
      // Neither: llama.cpp's raw logits row may be an earlier decode's (it copies them only for
      // rows with no device sampler), so there is nothing to pick from.
      spdlog::error("sample: sequence {} row {} has no device-sampled token; ending it", seq, batch_index);
      return llama_vocab_eos(vocab_);
    }
  }
  const float* row = llama_get_logits_ith(ctx_, batch_index);
  if (samplers_[s] == nullptr || row == nullptr) {
    // Not reachable through the scheduler (a row it asked for, of a live sequence); ending the
    // sequence beats reading a row that is not there.
    spdlog::error("sample: sequence {} row {} has no sampler or logits; ending it", seq, batch_index);
    return llama_vocab_eos(vocab_);
  }
  // Greedy is the argmax of the logits row, which is all its one-sampler chain computes (and it
  // keeps no state): read the row in place instead of building the chain's 32k-entry candidate
  // array, which at 64 rows a tick was most of the host time between two decodes.
  if (greedy_[s]) return argmax_first(row, llama_vocab_n_tokens(vocab_));
  return llama_sampler_sample(samplers_[s], ctx_, batch_index);
}

std::span<const float> LlamaRuntime::logits(std::int32_t caller_index) {
  if (const HeldRow* held = held_row(caller_index)) return held->logits;
  const std::int32_t batch_index = row_of(caller_index);
  if (batch_index < 0) return {};
  // A row sampled on the device never came to the host.
  if (!backend_greedy_.empty() && llama_get_sampled_token_ith(ctx_, batch_index) != LLAMA_TOKEN_NULL) return {};
  const float* row = llama_get_logits_ith(ctx_, batch_index);
  if (row == nullptr) return {};
  return {row, static_cast<size_t>(llama_vocab_n_tokens(vocab_))};
}

std::int32_t LlamaRuntime::graphs_reused() const { return llama_perf_context(ctx_).n_reused; }

void LlamaRuntime::set_threads(std::int32_t n) {
  if (n <= 0 || n == n_threads_) return;
  llama_set_n_threads(ctx_, n, n);
  if (embedder_) embedder_->set_threads(n);
  n_threads_ = n;
}

std::int32_t LlamaRuntime::embed_max_tokens() const {
  // The model's trained context, at most 8192: an embeddings context holds one pass's inputs.
  const std::int32_t trained = llama_model_n_ctx_train(model_);
  return std::min<std::int32_t>(trained > 0 ? trained : kFallbackContext, 8192);
}

Status LlamaRuntime::embed(std::span<const std::vector<Token>> inputs, std::vector<std::vector<float>>* out) {
  if (!embedder_) {
    Status st;
    embedder_ = Embedder::open(model_, embed_max_tokens(), n_threads_, &st);
    if (!embedder_) return st;
  }
  for (const auto& in : inputs) {
    for (Token t : in) {
      if (!valid_token(t)) return Status(ErrorCode::kBadRequest, "token " + std::to_string(t) + " is not in the vocabulary", "input");
    }
  }
  return embedder_->embed(inputs, out);
}

std::string LlamaRuntime::describe() const {
  char desc[256];
  llama_model_desc(model_, desc, sizeof desc);
  return std::string(desc) + ", " + std::to_string(llama_model_n_params(model_) / 1000000) + "M params, n_ctx " +
         std::to_string(n_ctx_) + (n_ctx_why_.empty() ? "" : " (" + n_ctx_why_ + ")") + (per_seq_ ? " (per-sequence KV: room per request " + std::to_string(n_ctx_seq_) + " cells)" : std::string(" (unified KV)")) + ", n_batch " + std::to_string(n_batch_) + " (passes of " + std::to_string(n_ubatch_) + ")" + ", sequences " +
         std::to_string(n_seq_max_) + ", threads " + std::to_string(llama_n_threads(ctx_)) +
         ", flash attention " + std::string(enum_name(kFlashAttentionNames, flash_attn_)) +
         (backend_greedy_.empty() ? "" : ", greedy sampled on the device") + "; weights: " + placement_;
}

std::string LlamaRuntime::memory_plan() const {
  const auto mib = [](double bytes) { return std::to_string(static_cast<long long>(bytes / (1 << 20) + 0.5)) + " MiB"; };
  const std::int64_t cell = kv_bytes_per_token(model_);
  std::string plan = "weights " + mib(static_cast<double>(llama_model_size(model_))) + "; KV " +
                     mib(static_cast<double>(cell) * n_ctx_) + " = " +
                     (per_seq_ ? std::to_string(n_seq_max_) + " sessions x " + std::to_string(n_ctx_seq_) + " cells"
                               : std::to_string(n_ctx_) + " cells shared by " + std::to_string(n_seq_max_) + " sequences") +
                     " x " + std::to_string(cell >> 10) + " KiB";
  if (!buffers_.empty()) plan += "; llama.cpp's buffers: " + buffers_;
  plan += kv_budget_ >= 0 ? "; KV budget " + mib(static_cast<double>(kv_budget_)) + " (" + kv_budget_why_ + ")"
                          : "; KV budget unknown";
  return plan;
}

}  // namespace uma

namespace uma {

Decoder::Shape LlamaRuntime::shape() const {
  Shape s;
  s.weight_bytes = static_cast<double>(llama_model_size(model_));
  s.params = static_cast<double>(llama_model_n_params(model_));
  s.n_layer = llama_model_n_layer(model_);
  s.n_embd = llama_model_n_embd(model_);
  const double heads = std::max(1, llama_model_n_head(model_));
  // K and V in f16 (the cache type umad creates), n_head_kv heads of n_embd / n_head each.
  s.kv_bytes_per_cell = 2.0 * 2.0 * s.n_layer * s.n_embd / heads * llama_model_n_head_kv(model_);
  return s;
}

}  // namespace uma
