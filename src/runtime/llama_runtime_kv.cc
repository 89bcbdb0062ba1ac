// LlamaRuntime: a sequence's KV (runtime/llama_runtime.h): prefixes shared or copied between
// streams, state saved to and restored from host memory, parked and resumed, trimmed, counted.
#include <llama.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "runtime/llama_runtime.h"
#include "runtime/sampler_chain.h"

namespace uma {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::size_t LlamaRuntime::kv_state_bytes(std::int32_t seq) const {
  return llama_state_seq_get_size(ctx_, seq);
}

namespace {
void free_parked_sampler(void* p) { llama_sampler_free(static_cast<llama_sampler*>(p)); }
void keep_unparked_sampler(void*) {}
}  // namespace

void LlamaRuntime::share_prefix(std::int32_t src, std::int32_t dst, std::int32_t n) {
  llama_memory_t mem = llama_get_memory(ctx_);
  if (!per_seq_) {
    llama_memory_seq_cp(mem, src, dst, 0, n);
    return;
  }
  // Between KV streams llama.cpp copies whole streams (queued until the next decode); then the
  // copy is cut back to the prefix.
  llama_memory_seq_cp(mem, src, dst, -1, -1);
  llama_memory_seq_rm(mem, dst, n, -1);
  note_stream_copy(src, dst);
}

void LlamaRuntime::note_stream_copy(std::int32_t src, std::int32_t dst) {
  copy_pending_[static_cast<size_t>(src)] |= kCopySource;
  copy_pending_[static_cast<size_t>(dst)] |= kCopyDestination;
}

Status LlamaRuntime::check_no_pending_copy(std::int32_t seq, std::uint8_t role) const {
  if (seq < 0 || seq >= n_seq_max_ || (copy_pending_[static_cast<size_t>(seq)] & role) == 0) return Status::Ok();
  return Status(ErrorCode::kKvPending, role == kCopyDestination
                                           ? "the sequence's KV is still being copied in (until the next decode)"
                                           : "the sequence's stream is still being copied out (until the next decode)");
}

void LlamaRuntime::move_sequence(std::int32_t from, std::int32_t to) {
  if (from < 0 || from >= n_seq_max_ || to < 0 || to >= n_seq_max_ || from == to) return;
  llama_memory_t mem = llama_get_memory(ctx_);
  llama_memory_seq_cp(mem, from, to, -1, -1);
  llama_memory_seq_rm(mem, from, -1, -1);
  if (per_seq_) note_stream_copy(from, to);
  set_chain(to, samplers_[static_cast<size_t>(from)]);
  set_chain(from, nullptr);
}

void LlamaRuntime::drop_sampler(std::int32_t seq) {
  if (seq < 0 || seq >= n_seq_max_) return;
  llama_sampler*& s = samplers_[static_cast<size_t>(seq)];
  if (s != nullptr) llama_sampler_free(s);
  s = nullptr;
}

Status LlamaRuntime::save_kv(std::int32_t seq, HostBytes& out) const {
  if (Status st = check_no_pending_copy(seq, kCopyDestination); !st.ok()) return st;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t need = llama_state_seq_get_size(ctx_, seq);
  out = kv_host_ ? kv_host_->take(need) : HostBytes::heap(need);
  const size_t n = llama_state_seq_get_data(ctx_, out.data(), out.size(), seq);
  spdlog::debug("kv save of sequence {}: {} bytes in {:.2f} ms", seq, n, ms_since(t0));
  if (n == 0 && !out.empty()) {
    out.clear();
    return Status(ErrorCode::kInternal, "cannot copy the sequence's KV");
  }
  out.truncate(n);
  return Status::Ok();
}

void LlamaRuntime::prepare_save(std::int32_t seq) {
  if (kv_host_ && check_no_pending_copy(seq, kCopyDestination).ok()) kv_host_->prepare(llama_state_seq_get_size(ctx_, seq));
}

Status LlamaRuntime::restore_kv(std::int32_t seq, std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return Status::Ok();
  if (Status st = check_no_pending_copy(seq, kCopySource); !st.ok()) return st;
  const auto t0 = std::chrono::steady_clock::now();
  if (llama_state_seq_set_data(ctx_, bytes.data(), bytes.size(), seq) == 0) {
    llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
    return Status(ErrorCode::kKvExhausted, "cannot restore the sequence's KV");
  }
  spdlog::debug("kv restore of sequence {}: {} bytes in {:.2f} ms", seq, bytes.size(), ms_since(t0));
  return Status::Ok();
}

Status LlamaRuntime::park_sequence(std::int32_t seq, bool save_kv_bytes, ParkedSequence& out) {
  if (seq < 0 || seq >= n_seq_max_ || samplers_[static_cast<size_t>(seq)] == nullptr) {
    return Status(ErrorCode::kInternal, "park of a sequence that is not live");
  }
  out.kv.clear();
  if (save_kv_bytes) {
    if (Status st = save_kv(seq, out.kv); !st.ok()) return st;
  }
  llama_sampler*& s = samplers_[static_cast<size_t>(seq)];
  out.sampler = std::shared_ptr<void>(s, &free_parked_sampler);
  s = nullptr;
  llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  return Status::Ok();
}

Status LlamaRuntime::unpark_sequence(std::int32_t seq, ParkedSequence& from) {
  if (seq < 0 || seq >= n_seq_max_ || from.sampler == nullptr) return Status(ErrorCode::kInternal, "bad unpark");
  end_sequence(seq);
  // Take the chain back: disarm the deleter, then drop the owner.
  set_chain(seq, static_cast<llama_sampler*>(from.sampler.get()));
  *std::get_deleter<void (*)(void*)>(from.sampler) = &keep_unparked_sampler;
  from.sampler.reset();
  const Status st = restore_kv(seq, from.kv);
  from.kv.clear();
  return st;
}

void LlamaRuntime::trim_sequence(std::int32_t seq, std::int32_t n) {
  if (seq >= 0 && seq < n_seq_max_) llama_memory_seq_rm(llama_get_memory(ctx_), seq, n, -1);
}

std::int32_t LlamaRuntime::kv_tokens(std::int32_t seq) const {
  llama_memory_t mem = llama_get_memory(ctx_);
  const llama_pos hi = llama_memory_seq_pos_max(mem, seq);
  if (hi < 0) return 0;
  return hi - llama_memory_seq_pos_min(mem, seq) + 1;
}

}  // namespace uma
