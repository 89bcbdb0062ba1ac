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

// One read_direct call: the open file, the blocks still to read, and the chunks handed to the
// verify pool as their last block lands.
class DirectReader {
 public:
  DirectReader(const std::string& path, const std::shared_ptr<ModelImage>& image, VerifyPool& pool,
               const DirectReadOptions& options)
      : path_(path), image_(image), m_(image->manifest()), pool_(pool), options_(options),
        verdicts_(std::make_shared<Verdicts>()) {}

  // O_DIRECT where the file system allows it; the file must be the manifest's size.
  Status open_file() {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd_ < 0 && errno == EINVAL) {  // no O_DIRECT here (tmpfs)
      fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      stats_.direct = false;
    }
    if (fd_ < 0) return {ErrorCode::kIo, path_ + ": " + std::strerror(errno)};
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != m_.bytes) {
      close_file();
      return {ErrorCode::kIo, path_ + ": " + std::to_string(st.st_size) + " bytes, the manifest says " + std::to_string(m_.bytes)};
    }
    return Status::Ok();
  }

  void close_file() { ::close(fd_); }

  // Every block of every wanted chunk, in file order.
  void plan(const std::vector<std::uint8_t>& want) {
    blocks_left_.assign(m_.chunk_count(), 0);
    for (std::size_t i = 0; i < m_.chunk_count(); ++i) {
      if (image_->is_ready(i) || (!want.empty() && (i >= want.size() || !want[i]))) continue;
      const std::uint64_t end = m_.chunk_offset(i) + m_.chunk_size(i);
      for (std::uint64_t off = m_.chunk_offset(i); off < end; off += options_.block) {
        // O_DIRECT lengths are whole pages: the file's last page is asked for whole and comes short.
        const std::uint64_t len = std::min(options_.block, (end - off + kChunkAlign - 1) / kChunkAlign * kChunkAlign);
        todo_.push_back({i, off, static_cast<std::uint32_t>(len)});
        ++blocks_left_[i];
      }
    }
  }

  // No io_uring here (a container runtime's seccomp profile refuses it, an old kernel): the same
  // blocks with pread, one at a time, into the same memory.
  Status read_with_pread() {
    stats_.io_uring = false;
    for (const Read& b : todo_) {
      if (cancelled()) return stopping();
      std::uint64_t done = 0;
      while (done < b.size) {
        const ssize_t n = ::pread(fd_, image_->data() + b.offset + done, b.size - done, static_cast<off_t>(b.offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return {ErrorCode::kIo, path_ + ": read at " + std::to_string(b.offset) + ": " + std::strerror(errno)};
        if (n == 0) break;
        done += static_cast<std::uint64_t>(n);
      }
      stats_.bytes_read += std::min<std::uint64_t>(done, m_.bytes - b.offset);
      if (b.offset + done < std::min<std::uint64_t>(m_.bytes, b.offset + b.size)) {
        return {ErrorCode::kIo, path_ + ": the file ended early"};
      }
      if (--blocks_left_[b.chunk] == 0) verify(b.chunk);
    }
    return Status::Ok();
  }

  // `depth` reads in flight on the ring until every block is in, or until a failure, after which
  // the reads in flight are reaped and no new ones start.
  Status read_with_io_uring(io_uring& ring) {
    ring_ = &ring;
    slots_.assign(static_cast<std::size_t>(options_.depth), Read{});
    for (int s = options_.depth - 1; s >= 0; --s) free_slots_.push_back(s);
    while ((!todo_.empty() && failure_.ok()) || in_flight_ > 0) {
      if (failure_.ok() && cancelled()) failure_ = stopping();
      while (failure_.ok() && !todo_.empty() && !free_slots_.empty()) {
        const int slot = free_slots_.back();
        free_slots_.pop_back();
        slots_[static_cast<std::size_t>(slot)] = todo_.front();
        todo_.pop_front();
        submit(slot);
      }
      io_uring_submit(ring_);
      io_uring_cqe* cqe = nullptr;
      if (int rc = io_uring_wait_cqe(ring_, &cqe); rc < 0) {
        if (rc == -EINTR) continue;
        failure_ = {ErrorCode::kIo, std::string("io_uring_wait_cqe: ") + std::strerror(-rc)};
        break;  // nothing more can be reaped safely
      }
      const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(ring_, cqe);
      --in_flight_;
      complete(slot, res);
    }
    return failure_;
  }

  // Every verdict in, then the outcome.
  Status finish(const Status& failure, std::vector<std::size_t>* corrupt, DirectReadStats* stats) {
    std::unique_lock lock(verdicts_->mu);
    verdicts_->cv.wait(lock, [&] { return verdicts_->pending == 0; });
    stats_.chunks_ok = verdicts_->ok;
    if (corrupt) {
      *corrupt = verdicts_->corrupt;
      std::sort(corrupt->begin(), corrupt->end());
    }
    if (stats) *stats = stats_;
    return failure;
  }

 private:
  bool cancelled() const { return options_.cancel != nullptr && options_.cancel->load(); }
  static Status stopping() { return {ErrorCode::kShuttingDown, "the model store is stopping"}; }

  // A chunk whose blocks are all in goes to the verify pool; a match is ready.
  void verify(std::size_t chunk) {
    {
      std::lock_guard lock(verdicts_->mu);
      ++verdicts_->pending;
    }
    pool_.submit(image_, chunk, [verdicts = verdicts_, image = image_, chunk](Status s) {
      if (s.ok()) image->chunk_ready(chunk);
      std::lock_guard lock(verdicts->mu);
      if (s.ok()) ++verdicts->ok; else verdicts->corrupt.push_back(chunk);
      if (--verdicts->pending == 0) verdicts->cv.notify_all();
    });
  }

  // The slot's block, from where it has got to.
  void submit(int slot) {
    Read& r = slots_[static_cast<std::size_t>(slot)];
    io_uring_sqe* sqe = io_uring_get_sqe(ring_);  // never null: at most `depth` in flight, the ring's size
    io_uring_prep_read(sqe, fd_, image_->data() + r.offset + r.done, r.size - r.done, r.offset + r.done);
    io_uring_sqe_set_data64(sqe, static_cast<std::uint64_t>(slot));
    ++in_flight_;
  }

  // One read's completion: an error, the rest of a short read asked for, or the block in.
  void complete(int slot, int res) {
    Read& r = slots_[static_cast<std::size_t>(slot)];
    const std::uint64_t file_left = m_.bytes - (r.offset + r.done);
    if (res < 0 && res != -EAGAIN && res != -EINTR) {
      if (failure_.ok()) failure_ = {ErrorCode::kIo, path_ + ": read at " + std::to_string(r.offset) + ": " + std::strerror(-res)};
      free_slots_.push_back(slot);
      return;
    }
    if (res > 0) {
      r.done += static_cast<std::uint32_t>(res);
      stats_.bytes_read += static_cast<std::uint64_t>(std::min<std::uint64_t>(res, file_left));
    }
    const bool at_eof = res == 0 || r.offset + r.done >= m_.bytes;
    if (r.done < r.size && !at_eof) {  // short read: the rest of the block
      if (failure_.ok()) submit(slot); else free_slots_.push_back(slot);
      return;
    }
    if (res == 0 && r.offset + r.done < std::min<std::uint64_t>(m_.bytes, r.offset + r.size)) {
      if (failure_.ok()) failure_ = {ErrorCode::kIo, path_ + ": the file ended early"};
      free_slots_.push_back(slot);
      return;
    }
    free_slots_.push_back(slot);
    if (--blocks_left_[r.chunk] == 0 && failure_.ok()) verify(r.chunk);
  }

  const std::string& path_;
  std::shared_ptr<ModelImage> image_;
  const Manifest& m_;
  VerifyPool& pool_;
  const DirectReadOptions& options_;
  std::shared_ptr<Verdicts> verdicts_;  // outlives the call when a verdict comes late
  DirectReadStats stats_;
  int fd_ = -1;
  std::deque<Read> todo_;
  std::vector<std::uint32_t> blocks_left_;  // by chunk: its blocks not in yet
  // io_uring: the read each slot has in flight, the free slots, and the first failure.
  io_uring* ring_ = nullptr;
  std::vector<Read> slots_;
  std::vector<int> free_slots_;
  int in_flight_ = 0;
  Status failure_;
};

}  // namespace

Status read_direct(const std::string& path, const std::shared_ptr<ModelImage>& image, VerifyPool& pool,
                   const DirectReadOptions& options, const std::vector<std::uint8_t>& want,
                   std::vector<std::size_t>* corrupt, DirectReadStats* stats) {
  if (options.block == 0 || options.block % kChunkAlign != 0 || options.depth <= 0) {
    return {ErrorCode::kInvalidArgument, "read_direct: block must be a multiple of 4096 and depth positive"};
  }
  DirectReader reader(path, image, pool, options);
  if (Status s = reader.open_file(); !s.ok()) return s;
  reader.plan(want);
  io_uring ring{};
  const int rc = options.io_uring ? io_uring_queue_init(static_cast<unsigned>(options.depth), &ring, 0) : -ENOSYS;
  Status failure;
  if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES) {
    failure = reader.read_with_pread();
  } else if (rc < 0) {
    reader.close_file();
    return {ErrorCode::kIo, std::string("io_uring_queue_init: ") + std::strerror(-rc)};
  } else {
    failure = reader.read_with_io_uring(ring);
    io_uring_queue_exit(&ring);
  }
  reader.close_file();
  return reader.finish(failure, corrupt, stats);
}

}  // namespace uma::store
