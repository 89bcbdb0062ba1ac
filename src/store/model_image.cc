#include "store/model_image.h"

#include <sys/mman.h>
#include <unistd.h>

namespace uma::store {

HostMemory allocate_pageable(std::uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return {};
  ::madvise(p, bytes, MADV_HUGEPAGE);
  HostMemory m;
  m.data = static_cast<std::uint8_t*>(p);
  m.size = bytes;
  m.release = [p, bytes] { ::munmap(p, bytes); };
  return m;
}

HostMemory allocate_shared(std::uint64_t bytes) {
  const int fd = ::memfd_create("uma-model-image", MFD_CLOEXEC);
  if (fd < 0) return allocate_pageable(bytes);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return {};
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return {};
  }
  HostMemory m;
  m.data = static_cast<std::uint8_t*>(p);
  m.size = bytes;
  m.fd = fd;
  m.release = [p, bytes, fd] {
    ::munmap(p, bytes);
    ::close(fd);
  };
  return m;
}

std::shared_ptr<ModelImage> ModelImage::create(std::shared_ptr<const Manifest> manifest, const HostAllocator& alloc,
                                               Status* status) {
  const std::uint64_t cap = (manifest->bytes + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  HostMemory mem = alloc ? alloc(cap) : allocate_shared(cap);
  if (mem.data == nullptr) {
    *status = {ErrorCode::kModelLoad, manifest->id + ": cannot allocate " + std::to_string(cap) + " bytes of host memory"};
    return nullptr;
  }
  return std::shared_ptr<ModelImage>(new ModelImage(std::move(manifest), std::move(mem)));
}

ModelImage::ModelImage(std::shared_ptr<const Manifest> m, HostMemory mem)
    : manifest_(std::move(m)), mem_(std::move(mem)), ready_(manifest_->chunk_count(), 0) {}

ModelImage::~ModelImage() {
  if (mem_.release) mem_.release();
}

void ModelImage::chunk_ready(std::size_t i) {
  {
    std::lock_guard lock(mu_);
    if (i >= ready_.size() || ready_[i]) return;
    ready_[i] = 1;
    ++n_ready_;
    ready_bytes_ += manifest_->chunk_size(i);
  }
  cv_.notify_all();
}

void ModelImage::fail(Status why) {
  {
    std::lock_guard lock(mu_);
    if (!failed_.ok() || n_ready_ == ready_.size()) return;
    failed_ = std::move(why);
  }
  cv_.notify_all();
}

Status ModelImage::wait(std::uint64_t offset, std::uint64_t size) const {
  if (offset + size > manifest_->bytes) return {ErrorCode::kInternal, "a wait past the model's end"};
  const std::size_t first = manifest_->first_chunk(offset), last = manifest_->last_chunk(offset, size);
  std::unique_lock lock(mu_);
  for (std::size_t i = first; i <= last && i < ready_.size(); ++i) {
    cv_.wait(lock, [&] { return ready_[i] || !failed_.ok(); });
    if (!ready_[i]) return failed_;
  }
  return {};
}

bool ModelImage::complete() const {
  std::lock_guard lock(mu_);
  return n_ready_ == ready_.size();
}
bool ModelImage::is_ready(std::size_t i) const {
  std::lock_guard lock(mu_);
  return i < ready_.size() && ready_[i];
}
Status ModelImage::status() const {
  std::lock_guard lock(mu_);
  return failed_;
}
std::uint64_t ModelImage::ready_bytes() const {
  std::lock_guard lock(mu_);
  return ready_bytes_;
}

}  // namespace uma::store
