#include "runtime/image_loader.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "ggml-backend.h"
#include "llama.h"
#include "runtime/host_pins.h"
#include "runtime/llama_runtime.h"

namespace uma {
namespace {

using Clock = std::chrono::steady_clock;

// The stdio stream's state: a read position over the image.
struct Cookie {
  store::ModelImage* image = nullptr;
  std::uint64_t pos = 0;
  Status error;
  ImageLoadStats stats;
  Clock::time_point first_tensor{};  // llama.cpp's first ask for a tensor's bytes
};

// Counts a tensor llama.cpp is about to copy out of caller memory.
void note_tensor(Cookie& k, std::uint64_t n) {
  if (k.stats.tensor_bytes == 0) k.first_tensor = Clock::now();
  k.stats.tensor_bytes += n;
}

// The load's end: the tensor phase's length, where there was one.
void end_tensors(Cookie& k, Clock::time_point end) {
  if (k.stats.tensor_bytes > 0) k.stats.tensor_seconds = std::chrono::duration<double>(end - k.first_tensor).count();
}

// Waits until [offset, offset + n) of the image is ready, the time counted as waiting, and counts
// the bytes; false (the error kept) when the image failed.
bool wait_ready(Cookie& k, std::uint64_t offset, std::uint64_t n) {
  const auto w = Clock::now();
  if (Status s = k.image->wait(offset, n); !s.ok()) {
    k.error = s;
    return false;
  }
  k.stats.wait_seconds += std::chrono::duration<double>(Clock::now() - w).count();
  k.stats.bytes_read += n;
  return true;
}

ssize_t cookie_read(void* c, char* buf, size_t n) {
  Cookie& k = *static_cast<Cookie*>(c);
  const std::uint64_t size = k.image->manifest().bytes;
  if (k.pos >= size || n == 0) return 0;
  n = static_cast<size_t>(std::min<std::uint64_t>(n, size - k.pos));
  if (!wait_ready(k, k.pos, n)) {
    errno = EIO;
    return -1;
  }
  const auto c0 = Clock::now();
  std::memcpy(buf, k.image->data() + k.pos, n);
  k.stats.copy_seconds += std::chrono::duration<double>(Clock::now() - c0).count();
  k.pos += n;
  return static_cast<ssize_t>(n);
}

int cookie_seek(void* c, off64_t* offset, int whence) {
  Cookie& k = *static_cast<Cookie*>(c);
  const std::int64_t size = static_cast<std::int64_t>(k.image->manifest().bytes);
  const std::int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? static_cast<std::int64_t>(k.pos) : size;
  const std::int64_t to = base + *offset;
  if (to < 0) {
    errno = EINVAL;
    return -1;
  }
  k.pos = static_cast<std::uint64_t>(to);
  *offset = to;
  return 0;
}

int cookie_close(void*) { return 0; }

// llama.cpp asks before it copies a tensor's bytes out of the image (the copy path).
bool wait_for_bytes(size_t offset, size_t size, void* c) {
  Cookie& k = *static_cast<Cookie*>(c);
  note_tensor(k, size);
  return wait_ready(k, offset, size);
}

// A file already in host memory: nothing to wait for, only the tensor phase timed.
bool bytes_in_memory(size_t, size_t size, void* c) {
  note_tensor(*static_cast<Cookie*>(c), size);
  return true;
}

ggml_backend_dev_t first_gpu() {
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) return d;
  }
  return nullptr;
}

}  // namespace

llama_model* load_model_from_image(const std::shared_ptr<store::ModelImage>& image, const llama_model_params& params,
                                   Status* status, ImageLoadStats* stats, ImageLoadPath path) {
  init_llama_backend();
  const auto t0 = Clock::now();
  if (path == ImageLoadPath::kAuto) {
    const bool gpu = llama_supports_gpu_offload() && params.n_gpu_layers != 0;
    path = image->fd() >= 0 && !gpu ? ImageLoadPath::kMap : ImageLoadPath::kCopy;
  }
  if (path == ImageLoadPath::kMap) {
    if (image->fd() < 0) {
      *status = {ErrorCode::kInternal, "mapping an image in place needs a memfd image"};
      return nullptr;
    }
    if (Status s = image->wait_complete(); !s.ok()) {
      *status = s;
      return nullptr;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    const int fd = ::dup(image->fd());
    FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "rb");
    if (f == nullptr) {
      if (fd >= 0) ::close(fd);
      *status = {ErrorCode::kModelLoad, std::string("cannot open the image's memfd: ") + std::strerror(errno)};
      return nullptr;
    }
    llama_model_params mp = params;
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    llama_model* model = llama_model_load_from_file_ptr(f, mp);
    std::fclose(f);  // the mapping keeps the pages
    if (model == nullptr) *status = {ErrorCode::kModelLoad, image->manifest().id + ": llama.cpp could not map it"};
    if (stats) {
      *stats = {};
      stats->path = static_cast<int>(ImageLoadPath::kMap);
      stats->wait_seconds = waited;
      stats->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return model;
  }
  Cookie cookie;
  cookie.image = image.get();
  cookie_io_functions_t io{cookie_read, nullptr, cookie_seek, cookie_close};
  FILE* f = ::fopencookie(&cookie, "rb", io);
  if (f == nullptr) {
    *status = {ErrorCode::kModelLoad, std::string("fopencookie: ") + std::strerror(errno)};
    return nullptr;
  }
  // Small reads (the metadata's strings) come from this buffer; large ones (tensors) bypass it and
  // reach cookie_read with llama.cpp's own destination.
  std::setvbuf(f, nullptr, _IOFBF, 256 << 10);
  llama_model_params mp = params;
  mp.load_mode = LLAMA_LOAD_MODE_NONE;  // reads, not a mapping: the stream is not a file
  llama_model* model = path == ImageLoadPath::kCopy
                           ? llama_model_load_from_file_ptr_and_data(f, image->data(), image->manifest().bytes,
                                                                     wait_for_bytes, &cookie, mp)
                           : llama_model_load_from_file_ptr(f, mp);
  std::fclose(f);
  const auto t1 = Clock::now();
  end_tensors(cookie, t1);
  cookie.stats.seconds = std::chrono::duration<double>(t1 - t0).count();
  if (path == ImageLoadPath::kCopy) {  // llama.cpp copies as it goes: whatever was not waiting
    cookie.stats.copy_seconds = std::max(0.0, cookie.stats.seconds - cookie.stats.wait_seconds);
  }
  if (model == nullptr) {
    *status = cookie.error.ok() ? Status(ErrorCode::kModelLoad, image->manifest().id + ": llama.cpp could not load it")
                                : cookie.error;
  }
  cookie.stats.path = static_cast<int>(path);
  if (stats) *stats = cookie.stats;
  return model;
}

store::HostAllocator host_allocator_for_backend() {
  init_llama_backend();
  if (const HostRegistration r = host_registration(); r.add != nullptr) {
    return [r](std::uint64_t bytes) -> store::HostMemory {
      store::HostMemory m = store::allocate_shared(bytes);
      if (m.data == nullptr || !r.add(m.data, bytes)) return m;  // pageable still works, slower
      m.pinned = true;
      auto release = std::move(m.release);
      void* p = m.data;
      m.release = [r, p, release = std::move(release)] {
        r.remove(p);
        release();
      };
      return m;
    };
  }
  store::HostAllocator locked = page_locked_allocator();
  if (!locked) return store::allocate_shared;
  return [locked](std::uint64_t bytes) -> store::HostMemory {
    store::HostMemory m = locked(bytes);
    if (m.data != nullptr && reinterpret_cast<std::uintptr_t>(m.data) % store::kChunkAlign != 0) {  // O_DIRECT needs pages
      m.release();
      return store::allocate_pageable(bytes);
    }
    return m;
  };
}

llama_model* load_model_from_host_file(const std::string& path, const llama_model_params& params, bool* handled,
                                       Status* status, ImageLoadStats* stats) {
  *handled = false;
  init_llama_backend();
  if (!llama_supports_gpu_offload() || params.n_gpu_layers == 0) return nullptr;
  const HostRegistration r = host_registration();
  if (r.add == nullptr) return nullptr;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;  // the caller's own load says why
  const auto t0 = Clock::now();
  // A standby pinned it ahead (host_pins.h): the load is the copy alone.
  HostPins& pins = process_host_pins();
  PinnedFile file = pins.take(fd).value_or(PinnedFile{});
  const bool pinned_ahead = file.data != nullptr;
  struct statfs fs {};
  struct stat st {};
  const bool in_memory = pinned_ahead || (::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == HUGETLBFS_MAGIC) &&
                                          ::fstat(fd, &st) == 0 && st.st_size > 0);
  if (!pinned_ahead && in_memory) {
    file.size = static_cast<std::size_t>(st.st_size);
    file.data = ::mmap(nullptr, file.size, PROT_READ, MAP_SHARED, fd, 0);
    if (file.data == MAP_FAILED) file.data = nullptr;
  }
  FILE* f = file.data == nullptr ? nullptr : ::fdopen(fd, "rb");
  if (f == nullptr) {
    if (file.data != nullptr) ::munmap(file.data, file.size);
    ::close(fd);
    return nullptr;  // not in memory: llama.cpp's own load
  }
  // One registration of the whole mapping: with 256 MiB slices pinned one by one on a second
  // thread while the copy ran, the load aborted in the CUDA backend (tensors are not page-aligned,
  // so some tensor's copy spans two registrations). Unpinned, the copy is pageable: slower, correct.
  *handled = true;
  const bool pinned = pinned_ahead || r.add(file.data, file.size);
  const double pinning = std::chrono::duration<double>(Clock::now() - t0).count();
  std::setvbuf(f, nullptr, _IOFBF, 256 << 10);
  llama_model_params mp = params;
  mp.load_mode = LLAMA_LOAD_MODE_NONE;
  Cookie timing;
  llama_model* model = llama_model_load_from_file_ptr_and_data(f, file.data, file.size, bytes_in_memory, &timing, mp);
  std::fclose(f);
  end_tensors(timing, Clock::now());
  if (pinned) r.remove(file.data);  // the weights are the GPU's now
  ::munmap(file.data, file.size);
  if (model == nullptr) *status = {ErrorCode::kModelLoad, "cannot load model '" + path + "' from host memory"};
  if (stats) {
    *stats = {};
    stats->path = static_cast<int>(ImageLoadPath::kCopy);
    stats->register_seconds = pinning;
    stats->pinned_ahead = pinned_ahead;
    stats->bytes_read = file.size;
    stats->tensor_seconds = timing.stats.tensor_seconds;
    stats->tensor_bytes = timing.stats.tensor_bytes;
    stats->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return model;
}

store::HostAllocator page_locked_allocator() {
  init_llama_backend();
  ggml_backend_dev_t gpu = first_gpu();
  ggml_backend_buffer_type_t buft = gpu ? ggml_backend_dev_host_buffer_type(gpu) : nullptr;
  if (buft == nullptr) return nullptr;
  return [buft](std::uint64_t bytes) -> store::HostMemory {
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(buft, bytes);
    if (b == nullptr) return {};
    store::HostMemory m;
    m.data = static_cast<std::uint8_t*>(ggml_backend_buffer_get_base(b));
    m.size = bytes;
    m.pinned = true;
    m.release = [b] { ggml_backend_buffer_free(b); };
    return m;
  };
}

bool backend_has_pinned_host_memory() {
  init_llama_backend();
  ggml_backend_dev_t gpu = first_gpu();
  return gpu != nullptr && ggml_backend_dev_host_buffer_type(gpu) != nullptr;
}

}  // namespace uma
