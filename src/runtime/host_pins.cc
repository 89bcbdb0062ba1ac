#include "runtime/host_pins.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "ggml-backend.h"
#include "runtime/llama_runtime.h"

namespace uma {
namespace {

bool identify(int fd, PinnedFile* f) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) return false;
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  f->size = static_cast<std::size_t>(st.st_size);
  return true;
}

bool same_file(const PinnedFile& a, const PinnedFile& b) { return a.dev == b.dev && a.ino == b.ino && a.size == b.size; }

}  // namespace

HostRegistration host_registration() {
  init_llama_backend();
  ggml_backend_dev_t gpu = nullptr;
  for (size_t i = 0; i < ggml_backend_dev_count() && gpu == nullptr; ++i) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) gpu = d;
  }
  ggml_backend_reg_t reg = gpu ? ggml_backend_dev_backend_reg(gpu) : nullptr;
  if (reg == nullptr) return {};
  HostRegistration r;
  r.add = reinterpret_cast<HostRegistration::Register>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_register_host_buffer"));
  r.remove = reinterpret_cast<HostRegistration::Unregister>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_unregister_host_buffer"));
  if (r.add == nullptr || r.remove == nullptr) return {};
  // ggml's CUDA backend registers host memory only when this is set (the switch llama.cpp's own
  // --mmap users flip); without it every registration says no and the copy is pageable.
  ::setenv("GGML_CUDA_REGISTER_HOST", "1", /*overwrite=*/0);
  return r;
}

int HostPins::set(const std::vector<int>& fds) {
  std::vector<PinnedFile> keep;
  for (int fd : fds) {
    PinnedFile want;
    if (!identify(fd, &want)) continue;
    const auto named = [&want](const PinnedFile& f) { return same_file(f, want); };
    if (std::any_of(keep.begin(), keep.end(), named)) continue;  // named twice
    if (auto it = std::find_if(pinned_.begin(), pinned_.end(), named); it != pinned_.end()) {
      keep.push_back(*it);
      pinned_.erase(it);
      continue;
    }
    if (registration_.add == nullptr) continue;
    void* p = ::mmap(nullptr, want.size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) continue;
    if (!registration_.add(p, want.size)) {
      ::munmap(p, want.size);
      continue;
    }
    want.data = p;
    keep.push_back(want);
  }
  clear();  // what was not named again
  pinned_ = std::move(keep);
  return static_cast<int>(pinned_.size());
}

std::optional<PinnedFile> HostPins::take(int fd) {
  PinnedFile want;
  if (!identify(fd, &want)) return std::nullopt;
  auto it = std::find_if(pinned_.begin(), pinned_.end(), [&want](const PinnedFile& f) { return same_file(f, want); });
  if (it == pinned_.end()) return std::nullopt;
  PinnedFile f = *it;
  pinned_.erase(it);
  return f;
}

void HostPins::keep_only(int fd) {
  std::optional<PinnedFile> kept = fd >= 0 ? take(fd) : std::nullopt;
  clear();
  if (kept) pinned_.push_back(*kept);
}

void HostPins::release(const PinnedFile& f) const {
  if (f.data == nullptr) return;
  registration_.remove(f.data);
  ::munmap(f.data, f.size);
}

void HostPins::clear() {
  for (const PinnedFile& f : pinned_) release(f);
  pinned_.clear();
}

HostPins& process_host_pins() {
  static HostPins* pins = new HostPins(host_registration());
  return *pins;
}

}  // namespace uma
