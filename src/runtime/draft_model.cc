#include "runtime/draft_model.h"

#include <llama.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <string_view>
#include <thread>

#include "runtime/argmax.h"
#include "runtime/llama_runtime.h"

namespace uma {

std::unique_ptr<DraftModel> DraftModel::open(const DraftConfig& config, const llama_vocab* target, Status* status) {
  init_llama_backend();
  std::unique_ptr<DraftModel> d(new DraftModel());
  llama_model_params mp = llama_model_default_params();
  const bool gpu = llama_supports_gpu_offload();
  mp.n_gpu_layers = !gpu ? 0 : config.n_gpu_layers < 0 ? std::numeric_limits<std::int32_t>::max() : config.n_gpu_layers;
  d->model_ = llama_model_load_from_file(config.model_path.c_str(), mp);
  if (d->model_ == nullptr) {
    *status = Status(ErrorCode::kModelLoad, "cannot load the draft model '" + config.model_path + "'");
    return nullptr;
  }
  // The target verifies the draft's token ids: they must mean the same text.
  const llama_vocab* v = llama_model_get_vocab(d->model_);
  bool same = llama_vocab_n_tokens(v) == llama_vocab_n_tokens(target) && llama_vocab_bos(v) == llama_vocab_bos(target) &&
              llama_vocab_eos(v) == llama_vocab_eos(target);
  for (llama_token t = 0; same && t < llama_vocab_n_tokens(v); t += std::max(1, llama_vocab_n_tokens(v) / 64)) {
    same = std::string_view(llama_vocab_get_text(v, t)) == llama_vocab_get_text(target, t);  // a sample of the texts
  }
  if (!same) {
    *status = Status(ErrorCode::kModelLoad, "the draft model '" + config.model_path + "' has another vocabulary (" +
                                                std::to_string(llama_vocab_n_tokens(v)) + " tokens against the target's " +
                                                std::to_string(llama_vocab_n_tokens(target)) + ", or other special tokens)");
    return nullptr;
  }
  llama_context_params cp = llama_context_default_params();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cp.n_ctx = static_cast<uint32_t>(config.n_ctx);
  cp.n_batch = static_cast<uint32_t>(config.n_batch);
  cp.n_ubatch = static_cast<uint32_t>(config.n_batch);
  cp.n_seq_max = static_cast<uint32_t>(config.n_seq_max);
  cp.n_threads = config.n_threads > 0 ? config.n_threads : hw;
  cp.n_threads_batch = cp.n_threads;
  cp.kv_unified = true;
  cp.no_perf = true;
  if (!gpu) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // as the target's (llama_runtime.cc)
  d->ctx_ = llama_init_from_model(d->model_, cp);
  if (d->ctx_ == nullptr) {
    *status = Status(ErrorCode::kModelLoad, "cannot create the draft model's context");
    return nullptr;
  }
  d->n_vocab_ = llama_vocab_n_tokens(v);
  d->one_token_catch_up_ = config.one_token_catch_up.value_or(mp.n_gpu_layers > 0);
  d->n_batch_ = static_cast<std::int32_t>(llama_n_batch(d->ctx_));
  d->fed_.assign(static_cast<std::size_t>(llama_n_seq_max(d->ctx_)), {});
  const auto nb = static_cast<std::size_t>(d->n_batch_);
  d->tok_.resize(nb);
  d->pos_.resize(nb);
  d->n_seq_id_.assign(nb, 1);
  d->seq_.resize(nb);
  d->seq_ptr_.resize(nb);
  for (std::size_t i = 0; i < nb; ++i) d->seq_ptr_[i] = &d->seq_[i];
  d->logits_.resize(nb);
  d->warm_up();
  *status = Status::Ok();
  return d;
}

void DraftModel::warm_up() {
  // A catch-up's shape and a step's, then nothing kept: on a GPU the first decode of each loads
  // its kernels (measured 247 ms for the first call on a GPU), which no request should wait for.
  // The catch-up's second run, a batch of prompts as a call feeds them, is the catch-up rate's
  // first estimate (the plan charges a call's catch-up before any was measured).
  const llama_token bos = std::max<llama_token>(0, llama_vocab_bos(llama_model_get_vocab(model_)));
  const std::int32_t n_catch = std::min<std::int32_t>(256, n_batch_);
  const std::int32_t n_seqs = std::max<std::int32_t>(1, std::min<std::int32_t>(8, static_cast<std::int32_t>(fed_.size())));
  const std::int32_t per_seq = std::max<std::int32_t>(1, n_catch / n_seqs);
  for (const std::int32_t n : {n_catch, n_catch, 1, 1}) {
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t seq = n == 1 ? 0 : std::min(i / per_seq, n_seqs - 1);
      tok_[static_cast<std::size_t>(i)] = bos;
      pos_[static_cast<std::size_t>(i)] = n == 1 ? 0 : i - seq * per_seq;
      seq_[static_cast<std::size_t>(i)] = seq;
      logits_[static_cast<std::size_t>(i)] = i + 1 == n || (n > 1 && (i + 1) % per_seq == 0);
    }
    n_ = n;
    const auto t0 = std::chrono::steady_clock::now();
    if (!decode(false, nullptr).ok()) break;
    llama_synchronize(ctx_);
    if (n > 1) {
      catch_up_ms_per_token_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
      catch_up_cells_ = n / 2.0;
    }
    for (std::int32_t seq = 0; seq < n_seqs; ++seq) llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  }
  n_ = 0;
  decodes_ = 0;
}

std::size_t DraftModel::cells_in_use() const {
  std::size_t n = 0;
  for (const auto& f : fed_) n += f.size();
  return n;
}

double DraftModel::catch_up_ms(std::size_t tokens) const {
  // Affine in the cells beside (a batch's own weight work is the constant): a catch-up measured
  // beside few cells predicts one beside many.
  constexpr double kCellsOfWeights = 512;
  const double beside = static_cast<double>(cells_in_use()) + static_cast<double>(tokens) / 2;
  return catch_up_ms_per_token_ * static_cast<double>(tokens) * (beside + kCellsOfWeights) / (catch_up_cells_ + kCellsOfWeights);
}

std::size_t DraftModel::kept(const std::vector<Token>& fed, std::span<const Token> tokens) {
  std::size_t common = 0;  // never the last token: it is fed again for its logits
  while (common < fed.size() && common + 1 < tokens.size() && fed[common] == tokens[common]) ++common;
  return common;
}

std::size_t DraftModel::lag(std::int32_t seq, std::span<const Token> tokens) const {
  if (seq < 0 || seq >= static_cast<std::int32_t>(fed_.size())) return tokens.size();
  return tokens.size() - kept(fed_[static_cast<std::size_t>(seq)], tokens);
}

DraftModel::~DraftModel() {
  if (ctx_ != nullptr) llama_free(ctx_);
  if (model_ != nullptr) llama_model_free(model_);
}

std::string DraftModel::describe() const {
  char desc[128];
  llama_model_desc(model_, desc, sizeof desc);
  return std::string(desc) + ", " + std::to_string(llama_model_n_params(model_) / 1000000) + "M params, " +
         std::to_string(llama_n_ctx(ctx_)) + " cells";
}

Status DraftModel::decode(bool step, double* ms_out) {
  llama_batch b{n_, tok_.data(), nullptr, pos_.data(), n_seq_id_.data(), seq_ptr_.data(), logits_.data()};
  const auto t0 = std::chrono::steady_clock::now();
  const std::int32_t rc = llama_decode(ctx_, b);
  ++decodes_;
  if (rc != 0) return Status(rc == 1 ? ErrorCode::kKvExhausted : ErrorCode::kDecodeFailed, "draft decode: " + std::to_string(rc));
  if (step) {
    llama_synchronize(ctx_);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    step_ms_.add(static_cast<std::size_t>(n_), ms);
    if (ms_out != nullptr) *ms_out = ms;
  }
  return Status::Ok();
}

void DraftModel::clear() {
  llama_memory_clear(llama_get_memory(ctx_), true);
  for (auto& f : fed_) f.clear();
}

void DraftModel::forget(std::int32_t seq) {
  if (seq < 0 || seq >= static_cast<std::int32_t>(fed_.size()) || fed_[static_cast<std::size_t>(seq)].empty()) return;
  llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  fed_[static_cast<std::size_t>(seq)].clear();
}

// One draft() call: the batch's rows waiting for their logits, each job's next proposal, what
// the catch-up fed, and the call's timing.
struct DraftModel::DraftCall {
  struct Row {
    const DraftJob* job;
    std::int32_t row;  // its logits row in the batch being built
  };
  std::vector<Row> pending;                             // rows of the batch being built
  std::vector<std::pair<const DraftJob*, Token>> live;  // each job's next proposal
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  int steps = 0;
  double steps_ms = 0.0;  // the steps' measured times, and the first's as a steady one would take
  std::size_t cells_before = 0;
  std::size_t caught_up = 0;  // most tokens one sequence fed: a new request's prompt, or what a tick accepted
  std::size_t fed_total = 0;  // all sequences' together
  std::int32_t k_max = 0;
  // A call whose catch-up is at most what a tick can accept: what each drafting tick costs.
  bool steady() const { return caught_up <= static_cast<std::size_t>(k_max) + 1; }
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  }
};

Status DraftModel::draft(std::span<const DraftJob> jobs) {
  DraftCall call;
  const auto fail = [&](Status st) {
    for (const DraftJob& j : jobs) j.out->clear();
    clear();
    return st;
  };
  if (Status st = catch_up(call, jobs); !st.ok()) return fail(st);
  // A call that fed a prompt: its catch-up's rate per token (the flush read every job's logits
  // row, so the catch-up has run). Calls feeding what a tick accepted are call_ms_'s samples.
  if (!call.steady() && call.fed_total > 0) {
    const double rate = call.elapsed_ms() / static_cast<double>(call.fed_total);  // the first replaces warm_up's estimate
    const double cells = (static_cast<double>(call.cells_before) + static_cast<double>(cells_in_use())) / 2;
    const bool first = catch_up_calls_++ == 0;
    catch_up_ms_per_token_ = first ? rate : 0.7 * catch_up_ms_per_token_ + 0.3 * rate;
    catch_up_cells_ = first ? cells : 0.7 * catch_up_cells_ + 0.3 * cells;
  }
  if (Status st = run_steps(call); !st.ok()) return fail(st);
  // A call that fed a new request's prompt is that request's one-time prefill, not what each
  // drafting tick costs: only a steady call is a sample.
  if (call.steady()) {
    llama_synchronize(ctx_);
    call_ms_.add(jobs.size(), std::max(0.0, call.elapsed_ms() - call.steps_ms));
  }
  return Status::Ok();
}

// Catch-up: each sequence's cells are made to hold its tokens; the last one's logits propose.
Status DraftModel::catch_up(DraftCall& call, std::span<const DraftJob> jobs) {
  llama_memory_t mem = llama_get_memory(ctx_);
  n_ = 0;
  call.cells_before = cells_in_use();
  for (const DraftJob& j : jobs) {
    j.out->clear();
    if (j.k <= 0 || j.tokens.empty() || j.seq < 0 || j.seq >= static_cast<std::int32_t>(fed_.size())) continue;
    std::vector<Token>& fed = fed_[static_cast<std::size_t>(j.seq)];
    const std::size_t n = j.tokens.size();
    const std::size_t common = kept(fed, j.tokens);
    if (common < fed.size()) {
      llama_memory_seq_rm(mem, j.seq, static_cast<llama_pos>(common), -1);
      fed.resize(common);
    }
    call.caught_up = std::max(call.caught_up, n - common);
    call.fed_total += n - common;
    call.k_max = std::max(call.k_max, j.k);
    // One token a decode (with its logits, as a step asks): the shape of the steps after it.
    const bool one_by_one = one_token_catch_up_ && jobs.size() == 1 && n - common <= static_cast<std::size_t>(j.k) + 1;
    for (std::size_t p = common; p < n; ++p) {
      if (n_ == n_batch_ || (one_by_one && n_ > 0)) {
        if (Status st = flush(call, false); !st.ok()) return st;
      }
      add_row(j.tokens[p], static_cast<std::int32_t>(p), j.seq, one_by_one || p + 1 == n);
    }
    call.pending.push_back({&j, n_ - 1});
    fed.insert(fed.end(), j.tokens.begin() + static_cast<std::ptrdiff_t>(common), j.tokens.end());
  }
  return flush(call, false);
}

// Steps: each job's proposal is taken, and fed back while it wants more (one token each).
Status DraftModel::run_steps(DraftCall& call) {
  for (std::int32_t step = 1; !call.live.empty(); ++step) {
    for (const auto& [job, t] : call.live) {
      job->out->push_back(t);
      if (step >= job->k) continue;
      std::vector<Token>& fed = fed_[static_cast<std::size_t>(job->seq)];
      add_row(t, static_cast<std::int32_t>(fed.size()), job->seq, true);
      call.pending.push_back({job, n_ - 1});
      fed.push_back(t);
    }
    call.live.clear();
    if (Status st = flush(call, true); !st.ok()) return st;
  }
  return Status::Ok();
}

void DraftModel::add_row(Token t, std::int32_t pos, std::int32_t seq, bool logits) {
  const auto i = static_cast<std::size_t>(n_++);
  tok_[i] = t;
  pos_[i] = pos;
  seq_[i] = seq;
  logits_[i] = logits;
}

// Decodes the batch and reads the proposal of every job with a row in it (before the next
// decode overwrites them).
Status DraftModel::flush(DraftCall& call, bool step) {
  if (n_ == 0) return Status::Ok();
  call.steps += step ? 1 : 0;
  double ms = step ? step_ms_.value(static_cast<std::size_t>(n_)) : 0.0;
  if (Status st = decode(step && call.steps > 1, &ms); !st.ok()) return st;
  call.steps_ms += ms;
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  for (const DraftCall::Row& r : call.pending) {
    const float* row = llama_get_logits_ith(ctx_, r.row);
    if (row == nullptr) return Status(ErrorCode::kDecodeFailed, "draft: no logits row");
    const Token t = argmax_first(row, n_vocab_);
    if (!llama_vocab_is_eog(vocab, t)) call.live.emplace_back(r.job, t);  // nothing after the end
  }
  call.pending.clear();
  n_ = 0;
  return Status::Ok();
}

void DraftModel::set_threads(std::int32_t n) {
  if (n > 0) llama_set_n_threads(ctx_, n, n);
}

}  // namespace uma
