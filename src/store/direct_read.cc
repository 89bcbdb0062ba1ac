#include "store/direct_read.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>

namespace uma::store {
namespace {

struct Read {
  std::size_t chunk;
  std::uint64_t offset;  // in the file
  std::uint32_t size;
  std::uint32_t done = 0;
};

// What the verify pool's callbacks report back; outlives the call through shared_ptr.
struct Verdicts {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t pending = 0;
  std::vector<std::size_t> corrupt;
  std::uint64_t ok = 0;
};

}  // namespace

Status read_direct(const std::string& path, const std::shared_ptr<ModelImage>& image, VerifyPool& pool,
                   const DirectReadOptions& options, const std::vector<std::uint8_t>& want,
                   std::vector<std::size_t>* corrupt, DirectReadStats* stats) {
  const Manifest& m = image->manifest();
  if (options.block == 0 || options.block % kChunkAlign != 0 || options.depth <= 0) {
    return {ErrorCode::kInvalidArgument, "read_direct: block must be a multiple of 4096 and depth positive"};
  }
  DirectReadStats local;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL) {  // no O_DIRECT here (tmpfs)
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    local.direct = false;
  }
  if (fd < 0) return {ErrorCode::kIo, path + ": " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != m.bytes) {
    ::close(fd);
    return {ErrorCode::kIo, path + ": " + std::to_string(st.st_size) + " bytes, the manifest says " + std::to_string(m.bytes)};
  }
  // Every block of every wanted chunk, in file order.
  std::deque<Read> todo;
  std::vector<std::uint32_t> blocks_left(m.chunk_count(), 0);
  for (std::size_t i = 0; i < m.chunk_count(); ++i) {
    if (image->is_ready(i) || (!want.empty() && (i >= want.size() || !want[i]))) continue;
    const std::uint64_t end = m.chunk_offset(i) + m.chunk_size(i);
    for (std::uint64_t off = m.chunk_offset(i); off < end; off += options.block) {
      // O_DIRECT lengths are whole pages: the file's last page is asked for whole and comes short.
      const std::uint64_t len = std::min(options.block, (end - off + kChunkAlign - 1) / kChunkAlign * kChunkAlign);
      todo.push_back({i, off, static_cast<std::uint32_t>(len)});
      ++blocks_left[i];
    }
  }
  auto verdicts = std::make_shared<Verdicts>();
  // A chunk whose blocks are all in goes to the verify pool; a match is ready.
  const auto verify = [&](std::size_t chunk) {
    {
      std::lock_guard lock(verdicts->mu);
      ++verdicts->pending;
    }
    pool.submit(image, chunk, [verdicts, image, chunk](Status s) {
      if (s.ok()) image->chunk_ready(chunk);
      std::lock_guard lock(verdicts->mu);
      if (s.ok()) ++verdicts->ok; else verdicts->corrupt.push_back(chunk);
      if (--verdicts->pending == 0) verdicts->cv.notify_all();
    });
  };
  // Every verdict in, then the outcome.
  const auto finish = [&](const Status& failure) {
    std::unique_lock lock(verdicts->mu);
    verdicts->cv.wait(lock, [&] { return verdicts->pending == 0; });
    local.chunks_ok = verdicts->ok;
    if (corrupt) {
      *corrupt = verdicts->corrupt;
      std::sort(corrupt->begin(), corrupt->end());
    }
    if (stats) *stats = local;
    return failure;
  };
  io_uring ring{};
  const int rc = options.io_uring ? io_uring_queue_init(static_cast<unsigned>(options.depth), &ring, 0) : -ENOSYS;
  if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES) {
    // No io_uring here (a container runtime's seccomp profile refuses it, an old kernel): the same
    // blocks with pread, one at a time, into the same memory.
    local.io_uring = false;
    Status failure;
    for (const Read& b : todo) {
      if (options.cancel != nullptr && options.cancel->load()) {
        failure = {ErrorCode::kShuttingDown, "the model store is stopping"};
        break;
      }
      std::uint64_t done = 0;
      while (done < b.size && failure.ok()) {
        const ssize_t n = ::pread(fd, image->data() + b.offset + done, b.size - done, static_cast<off_t>(b.offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) failure = {ErrorCode::kIo, path + ": read at " + std::to_string(b.offset) + ": " + std::strerror(errno)};
        if (n <= 0) break;
        done += static_cast<std::uint64_t>(n);
      }
      if (!failure.ok()) break;
      local.bytes_read += std::min<std::uint64_t>(done, m.bytes - b.offset);
      if (b.offset + done < std::min<std::uint64_t>(m.bytes, b.offset + b.size)) {
        failure = {ErrorCode::kIo, path + ": the file ended early"};
        break;
      }
      if (--blocks_left[b.chunk] == 0) verify(b.chunk);
    }
    ::close(fd);
    return finish(failure);
  }
  if (rc < 0) {
    ::close(fd);
    return {ErrorCode::kIo, std::string("io_uring_queue_init: ") + std::strerror(-rc)};
  }
  std::vector<Read> slots(static_cast<std::size_t>(options.depth));
  std::vector<int> free_slots;
  for (int s = options.depth - 1; s >= 0; --s) free_slots.push_back(s);
  Status failure;
  int in_flight = 0;
  const auto submit = [&](int slot) {
    Read& r = slots[static_cast<std::size_t>(slot)];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);  // never null: at most `depth` in flight, the ring's size
    io_uring_prep_read(sqe, fd, image->data() + r.offset + r.done, r.size - r.done, r.offset + r.done);
    io_uring_sqe_set_data64(sqe, static_cast<std::uint64_t>(slot));
    ++in_flight;
  };
  while ((!todo.empty() && failure.ok()) || in_flight > 0) {
    if (failure.ok() && options.cancel != nullptr && options.cancel->load()) {
      failure = {ErrorCode::kShuttingDown, "the model store is stopping"};
    }
    while (failure.ok() && !todo.empty() && !free_slots.empty()) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      slots[static_cast<std::size_t>(slot)] = todo.front();
      todo.pop_front();
      submit(slot);
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (int rc = io_uring_wait_cqe(&ring, &cqe); rc < 0) {
      if (rc == -EINTR) continue;
      failure = {ErrorCode::kIo, std::string("io_uring_wait_cqe: ") + std::strerror(-rc)};
      break;  // nothing more can be reaped safely
    }
    const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    Read& r = slots[static_cast<std::size_t>(slot)];
    const std::uint64_t file_left = m.bytes - (r.offset + r.done);
    if (res < 0 && res != -EAGAIN && res != -EINTR) {
      if (failure.ok()) failure = {ErrorCode::kIo, path + ": read at " + std::to_string(r.offset) + ": " + std::strerror(-res)};
      free_slots.push_back(slot);
      continue;
    }
    if (res > 0) {
      r.done += static_cast<std::uint32_t>(res);
      local.bytes_read += static_cast<std::uint64_t>(std::min<std::uint64_t>(res, file_left));
    }
    const bool at_eof = res == 0 || r.offset + r.done >= m.bytes;
    if (r.done < r.size && !at_eof) {  // short read: the rest of the block
      if (failure.ok()) submit(slot); else free_slots.push_back(slot);
      continue;
    }
    if (res == 0 && r.offset + r.done < std::min<std::uint64_t>(m.bytes, r.offset + r.size)) {
      if (failure.ok()) failure = {ErrorCode::kIo, path + ": the file ended early"};
      free_slots.push_back(slot);
      continue;
    }
    free_slots.push_back(slot);
    if (--blocks_left[r.chunk] == 0 && failure.ok()) verify(r.chunk);
  }
  io_uring_queue_exit(&ring);
  ::close(fd);
  return finish(failure);
}

}  // namespace uma::store
