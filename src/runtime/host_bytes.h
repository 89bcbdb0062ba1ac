// HostBytes: a move-only byte buffer in host memory, freed by the function it came with.
//
// A decoder fills it with a sequence's KV (a prefix snapshot, a paused request) and chooses the
// memory: page-locked where a GPU copies into and out of it, so the copy runs at the link's rate
// (an 8B's 3000-token prefix, 400 MB, took 300 ms through pageable memory on a GPU host), plain
// heap memory otherwise. Contract: not thread-safe; the release function runs once, on whichever
// thread destroys or clears the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

namespace uma {

class HostBytes {
 public:
  HostBytes() = default;
  HostBytes(std::uint8_t* data, std::size_t size, std::function<void()> release)
      : data_(data), size_(size), release_(std::move(release)) {}
  static HostBytes heap(std::size_t size) {
    auto* p = new std::uint8_t[size];
    return HostBytes(p, size, [p] { delete[] p; });
  }
  HostBytes(HostBytes&& o) noexcept : data_(o.data_), size_(o.size_), release_(std::move(o.release_)) {
    o.data_ = nullptr, o.size_ = 0, o.release_ = nullptr;
  }
  HostBytes& operator=(HostBytes&& o) noexcept {
    if (this != &o) {
      clear();
      std::swap(data_, o.data_), std::swap(size_, o.size_), std::swap(release_, o.release_);
    }
    return *this;
  }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;
  ~HostBytes() { clear(); }

  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Fewer bytes are meaningful than were allocated (the memory stays until clear()).
  void truncate(std::size_t n) { size_ = n < size_ ? n : size_; }
  void clear() {
    if (release_) release_();
    data_ = nullptr, size_ = 0, release_ = nullptr;
  }
  operator std::span<const std::uint8_t>() const { return {data_, size_}; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::function<void()> release_;
};

}  // namespace uma
