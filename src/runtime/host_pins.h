// Page-locking memory we mapped ourselves with the first GPU backend (cudaHostRegister under
// CUDA), and the model images a standby umad keeps pinned ahead of its handover.
//
// A pin belongs to the process that made it, so a umad loading the agent's DRAM-tier image pins
// it again: 0.3-0.4 s for a 4 GB image of 4 KiB pages, most of a cold start that is otherwise its
// copy. A standby (daemon/standby.h) is told the tier's images while it waits and pins them then;
// the load that takes it finds its image pinned. An image is known by its file's identity
// (device, inode, size), so the descriptor the handover brings finds the mapping made from
// another descriptor of the same memfd.
// Thread-safety: HostPins is used from one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace uma {

// A GPU backend's way to page-lock memory the caller allocated; both null where there is none.
struct HostRegistration {
  using Register = bool (*)(void*, std::size_t);
  using Unregister = void (*)(void*);
  Register add = nullptr;
  Unregister remove = nullptr;
};

// The first GPU backend's (initialises llama.cpp's backends).
HostRegistration host_registration();

// One file mapped read-only and pinned.
struct PinnedFile {
  void* data = nullptr;
  std::size_t size = 0;
  dev_t dev = 0;
  ino_t ino = 0;
};

class HostPins {
 public:
  explicit HostPins(HostRegistration r) : registration_(r) {}
  ~HostPins() { clear(); }
  HostPins(const HostPins&) = delete;
  HostPins& operator=(const HostPins&) = delete;

  // Makes the pinned set exactly the files `fds` open (the caller keeps its descriptors): new ones
  // mapped and pinned, those not named released. A file that cannot be mapped or pinned is left
  // out. Returns how many are pinned.
  int set(const std::vector<int>& fds);
  // The pinned mapping of the file `fd` opens, taken out of the set: the caller's to release().
  std::optional<PinnedFile> take(int fd);
  // Releases every file but the one `fd` opens (-1: all).
  void keep_only(int fd);
  // Unpins and unmaps.
  void release(const PinnedFile& f) const;
  void clear();
  std::size_t size() const { return pinned_.size(); }

 private:
  HostRegistration registration_;
  std::vector<PinnedFile> pinned_;
};

// The process's own set (a standby's, then its load's), made on first use with host_registration();
// never destroyed: process exit unpins.
HostPins& process_host_pins();

}  // namespace uma
