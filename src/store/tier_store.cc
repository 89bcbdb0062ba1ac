#include "store/tier_store.h"

#include <filesystem>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uma::store {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
}

Status io_error(const std::string& what) { return {ErrorCode::kIo, what + ": " + std::strerror(errno)}; }

// The NVMe tier's open download: the part file and its chunk map, written as chunks verify.
struct PartFile {
  int data = -1;
  int map = -1;
  ~PartFile() {
    if (data >= 0) ::close(data);
    if (map >= 0) ::close(map);
  }
  Status write_chunk(const Manifest& m, std::size_t i, std::span<const std::uint8_t> bytes) {
    std::uint64_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(data, bytes.data() + done, bytes.size() - done, static_cast<off_t>(m.chunk_offset(i) + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return io_error("writing the NVMe tier");
      done += static_cast<std::uint64_t>(n);
    }
    if (map >= 0) {
      const std::uint8_t one = 1;
      if (::pwrite(map, &one, 1, static_cast<off_t>(i)) != 1) return io_error("writing the NVMe tier's chunk map");
    }
    return {};
  }
};

// One fill's NVMe side: where the tier keeps the model (final, part and chunk-map files), its
// open download, and what reading it found.
struct NvmeFill {
  const Manifest& m;
  std::shared_ptr<ModelImage> image;
  std::string final_path, part_path, map_path;
  PartFile out;
  bool from_part = false;  // a download resumed from its part file
  std::vector<std::size_t> corrupt;
  DirectReadStats ds;
};

// The tier's complete file read into the image; with corrupt chunks, opened to be repaired in place.
Status read_nvme_copy(NvmeFill& f, VerifyPool& pool, const DirectReadOptions& direct) {
  Status s = read_direct(f.final_path, f.image, pool, direct, {}, &f.corrupt, &f.ds);
  if (s.ok() && !f.corrupt.empty()) {
    f.out.data = ::open(f.final_path.c_str(), O_WRONLY | O_CLOEXEC);  // repaired in place
    if (f.out.data < 0) s = io_error(f.final_path);
  }
  return s;
}

// A download to the tier: resumed from its part file where the chunk map matches, else started afresh.
Status open_part_download(NvmeFill& f, VerifyPool& pool, const DirectReadOptions& direct) {
  const Manifest& m = f.m;
  std::vector<std::uint8_t> have(m.chunk_count(), 0);
  if (file_size(f.part_path) == m.bytes && file_size(f.map_path) == m.chunk_count()) {
    const int fd = ::open(f.map_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && ::pread(fd, have.data(), have.size(), 0) == static_cast<ssize_t>(have.size())) f.from_part = true;
    if (fd >= 0) ::close(fd);
  }
  if (!f.from_part) {
    ::unlink(f.map_path.c_str());
    f.out.data = ::open(f.part_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    f.out.map = ::open(f.map_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f.out.data < 0 || f.out.map < 0 || ::ftruncate(f.out.data, static_cast<off_t>(m.bytes)) != 0 ||
        ::ftruncate(f.out.map, static_cast<off_t>(m.chunk_count())) != 0) {
      return io_error(f.part_path);
    }
    return {};
  }
  // Chunks the map says were written are read and verified like any NVMe read; the rest, and
  // any that fail, come from the remote tier.
  Status s;
  std::vector<std::uint8_t> want = have;
  if (std::any_of(want.begin(), want.end(), [](std::uint8_t b) { return b; })) {
    s = read_direct(f.part_path, f.image, pool, direct, want, &f.corrupt, &f.ds);
  }
  f.out.data = ::open(f.part_path.c_str(), O_WRONLY | O_CLOEXEC);
  f.out.map = ::open(f.map_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (f.out.data < 0 || f.out.map < 0) s = io_error(f.part_path);
  return s;
}

// No tier holds what the image lacks.
Status no_tier_error(const std::string& id, const std::vector<std::size_t>& corrupt) {
  std::string which;
  for (std::size_t k = 0; k < corrupt.size() && k < 8; ++k) which += (k ? ", " : "") + std::to_string(corrupt[k]);
  if (corrupt.size() > 8) which += ", ...";
  return {ErrorCode::kIo, id + (corrupt.empty() ? ": no tier holds it (no NVMe file, no URL)"
                                                : ": " + std::to_string(corrupt.size()) + " corrupt chunks (" + which +
                                                      ") and no remote tier to fetch them from")};
}

// What the image lacks, from the remote tier, each verified chunk written to the NVMe tier's file.
void fetch_missing_chunks(NvmeFill& f, const std::string& url, VerifyPool& pool, const RemoteOptions& remote,
                          FillRecord& rec) {
  RemoteStats rs;
  const ChunkCallback on_verified = [&out = f.out, &m = f.m](std::size_t i, std::span<const std::uint8_t> bytes) -> Status {
    return out.data >= 0 ? out.write_chunk(m, i, bytes) : Status{};
  };
  rec.status = fetch_remote(url, f.image, pool, remote, on_verified, &rs);
  rec.corrupt_chunks += rs.corrupt_chunks.load();
  rec.resumed_transfers = rs.resumed_transfers.load();
  if (rec.from == Tier::kNvme) rec.refetched_chunks = f.corrupt.size();
  rec.mixed = rec.from == Tier::kNvme || f.from_part;
}

// The written file made durable; a download becomes the tier's file and its chunk map goes.
Status keep_nvme_file(const NvmeFill& f, Tier from) {
  if (::fdatasync(f.out.data) != 0) return io_error("syncing the NVMe tier");
  if (from == Tier::kRemote && ::rename(f.part_path.c_str(), f.final_path.c_str()) != 0) return io_error(f.final_path);
  ::unlink(f.map_path.c_str());
  return {};
}

}  // namespace

bool TierStore::valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

TierStore::TierStore(TierConfig config)
    : config_(std::move(config)), host_pool_(config_.alloc, config_.pool_bytes), pool_(config_.verify_threads) {
  if (!config_.nvme_dir.empty()) ::mkdir(config_.nvme_dir.c_str(), 0700);
  config_.direct.cancel = &cancel_;
  config_.remote.cancel = &cancel_;
  loader_ = std::thread([this] { run(); });
}

TierStore::~TierStore() { stop(); }

void TierStore::stop() {
  if (!loader_.joinable()) return;
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cancel_ = true;
    dropped.swap(jobs_);
  }
  cv_.notify_all();
  for (Job& j : dropped) {
    if (j.image) j.image->fail({ErrorCode::kShuttingDown, "the model store is stopping"});
  }
  loader_.join();
}

std::string TierStore::nvme_path(const std::string& id) const { return config_.nvme_dir + "/" + id + ".gguf"; }

bool TierStore::nvme_complete(const std::string& id) const {
  if (config_.nvme_dir.empty()) return false;
  const auto it = entries_.find(id);
  const std::uint64_t want = it != entries_.end() && it->second.source.manifest ? it->second.source.manifest->bytes : 0;
  const std::uint64_t have = file_size(nvme_path(id));
  return have > 0 && (want == 0 || have == want);
}

Tier TierStore::tier_locked(const std::string& id) const {
  const auto it = entries_.find(id);
  if (it != entries_.end() && it->second.image && it->second.image->complete()) return Tier::kDram;
  if (nvme_complete(id)) return Tier::kNvme;
  if (it != entries_.end() && !it->second.source.url.empty()) return Tier::kRemote;
  return Tier::kNone;
}

Tier TierStore::tier(const std::string& id) const {
  std::lock_guard lock(mu_);
  return tier_locked(id);
}

std::shared_ptr<ModelImage> TierStore::acquire(const ModelSource& source, Status* status) {
  const std::string& id = source.manifest->id;
  if (!valid_id(id)) {
    *status = {ErrorCode::kInvalidArgument, "model id '" + id + "' is not a file name ([A-Za-z0-9._-], 1-128)"};
    return nullptr;
  }
  std::unique_lock lock(mu_);
  if (stopping_) {
    *status = {ErrorCode::kShuttingDown, "the model store is stopping"};
    return nullptr;
  }
  Entry& e = entries_[id];
  if (!e.source.manifest || e.source.manifest->chunks != source.manifest->chunks) e.source = source;
  if (e.image && !e.image->status().ok()) e.image.reset();  // a failed fill: try again
  // The catalog's model changed (added again with another file): the old image is not it. Its
  // users keep their copy; the NVMe file is checked against the new manifest when read.
  if (e.image && e.image->manifest().chunks != source.manifest->chunks) e.image.reset();
  ++e.users;
  e.last_used = ++clock_;
  if (e.image) return e.image;
  lock.unlock();
  auto image = ModelImage::create(source.manifest, host_pool_.allocator(), status);
  lock.lock();
  if (!image || stopping_) {
    --entries_[id].users;
    if (image) *status = {ErrorCode::kShuttingDown, "the model store is stopping"};
    return nullptr;
  }
  Entry& again = entries_[id];
  if (again.image) return again.image;  // another caller raced us here
  again.image = image;
  ++again.fills;
  jobs_.push_back({id, source, image});
  cv_.notify_all();
  lock.unlock();
  evict_dram();
  return image;
}

void TierStore::release(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.users == 0) return;
    --it->second.users;
    it->second.last_used = ++clock_;
  }
  evict_dram();
}

Status TierStore::prefetch(const ModelSource& source, Tier to) {
  if (to == Tier::kDram) {
    Status s;
    auto image = acquire(source, &s);
    if (!image) return s;
    release(source.manifest->id);
    return {};
  }
  if (to != Tier::kNvme || config_.nvme_dir.empty()) return {ErrorCode::kInvalidArgument, "prefetch to dram or nvme (this agent has no NVMe tier)"};
  std::lock_guard lock(mu_);
  Entry& e = entries_[source.manifest->id];
  if (!e.source.manifest) e.source = source;
  e.last_used = ++clock_;
  if (nvme_complete(source.manifest->id) || e.fills > 0) return {};
  ++e.fills;
  jobs_.push_back({source.manifest->id, source, nullptr});
  cv_.notify_all();
  return {};
}

void TierStore::forget(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && (it->second.users > 0 || it->second.fills > 0)) return;
  if (it != entries_.end()) entries_.erase(it);
  if (!config_.nvme_dir.empty()) ::unlink(nvme_path(id).c_str());
}

void TierStore::evict_dram() {
  std::vector<std::shared_ptr<ModelImage>> dropped;  // freed outside the lock
  {
    std::lock_guard lock(mu_);
    std::uint64_t kept = 0;
    for (auto& [id, e] : entries_) {
      if (e.image) kept += e.image->capacity();
    }
    while (kept > config_.dram_bytes) {
      Entry* victim = nullptr;
      for (auto& [id, e] : entries_) {
        if (!e.image || e.users > 0 || e.fills > 0) continue;
        if (!victim || e.last_used < victim->last_used) victim = &e;
      }
      if (!victim) break;  // everything left is in use: a budget is never a reason to fail a user
      kept -= victim->image->capacity();
      dropped.push_back(std::move(victim->image));
    }
  }
}

void TierStore::evict_nvme() {
  if (config_.nvme_dir.empty() || config_.nvme_bytes == 0) return;
  struct File {
    std::string id;
    std::uint64_t bytes;
    std::uint64_t last_used;
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  DIR* d = ::opendir(config_.nvme_dir.c_str());
  if (!d) return;
  while (dirent* de = ::readdir(d)) {
    const std::string name = de->d_name;
    if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".gguf") != 0) continue;
    const std::string id = name.substr(0, name.size() - 5);
    const std::uint64_t bytes = file_size(config_.nvme_dir + "/" + name);
    total += bytes;
    files.push_back({id, bytes, 0});
  }
  ::closedir(d);
  std::lock_guard lock(mu_);
  for (File& f : files) {
    auto it = entries_.find(f.id);
    f.last_used = it == entries_.end() ? 0 : it->second.last_used;
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.last_used < b.last_used; });
  for (const File& f : files) {
    if (total <= config_.nvme_bytes) break;
    auto it = entries_.find(f.id);
    if (it != entries_.end() && (it->second.fills > 0 || it->second.users > 0)) continue;
    if (::unlink(nvme_path(f.id).c_str()) == 0) total -= f.bytes;
  }
}

std::uint64_t TierStore::queued_bytes() const {
  std::lock_guard lock(mu_);
  std::uint64_t q = current_ ? current_->manifest().bytes - current_->ready_bytes() : current_left_;
  for (const Job& j : jobs_) q += j.source.manifest->bytes;
  return q;
}

double TierStore::rate_bytes_s(Tier t) const {
  std::lock_guard lock(mu_);
  return t < Tier::kNone ? rate_[static_cast<int>(t)] : 0.0;
}

void TierStore::drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
}

std::vector<FillRecord> TierStore::history() const {
  std::lock_guard lock(mu_);
  return history_;
}

std::vector<std::shared_ptr<ModelImage>> TierStore::dram_images() const {
  std::vector<std::pair<std::uint64_t, std::shared_ptr<ModelImage>>> kept;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, e] : entries_) {
      if (e.image && e.image->fd() >= 0 && e.image->complete()) kept.emplace_back(e.last_used, e.image);
    }
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::shared_ptr<ModelImage>> out;
  for (auto& [used, image] : kept) out.push_back(std::move(image));
  return out;
}

std::vector<ModelTierInfo> TierStore::list() const {
  std::lock_guard lock(mu_);
  std::vector<ModelTierInfo> out;
  for (const auto& [id, e] : entries_) {
    ModelTierInfo i;
    i.id = id;
    i.tier = tier_locked(id);
    i.filling = e.fills > 0;
    i.bytes = e.source.manifest ? e.source.manifest->bytes : 0;
    i.ready_bytes = e.image ? e.image->ready_bytes() : e.receiving ? e.receiving->ready_bytes() : 0;
    i.last_error = e.last_error;
    i.users = e.users;
    out.push_back(std::move(i));
  }
  // Complete files of the NVMe directory it has not been asked for yet (a restarted agent's, or
  // put there by `uma-store fetch`).
  if (config_.nvme_dir.empty()) return out;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(config_.nvme_dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".gguf") != 0) continue;
    const std::string id = name.substr(0, name.size() - 5);
    if (!valid_id(id) || entries_.count(id) > 0) continue;
    ModelTierInfo i;
    i.id = id;
    i.tier = Tier::kNvme;
    i.bytes = i.ready_bytes = f.file_size(ec);
    if (!ec) out.push_back(std::move(i));
  }
  return out;
}

void TierStore::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      current_ = job.image;
      current_left_ = job.source.manifest->bytes;
    }
    FillRecord rec = fill(job);
    {
      std::lock_guard lock(mu_);
      auto it = entries_.find(job.id);
      if (it != entries_.end()) {
        --it->second.fills;
        it->second.receiving.reset();
        it->second.last_error = rec.status.ok() ? "" : rec.status.message();
      }
      if (rec.status.ok() && !rec.mixed && rec.from < Tier::kNone && rec.seconds > 0) {
        double& r = rate_[static_cast<int>(rec.from)];
        const double measured = static_cast<double>(rec.bytes) / rec.seconds;
        r = r == 0 ? measured : 0.7 * r + 0.3 * measured;
      }
      history_.push_back(rec);
      if (history_.size() > 256) history_.erase(history_.begin());  // a long-lived agent's recent fills
      busy_ = false;
      current_.reset();
      current_left_ = 0;
    }
    evict_nvme();
    evict_dram();
    idle_cv_.notify_all();
  }
}

FillRecord TierStore::fill(const Job& job) {
  FillRecord rec;
  rec.id = job.id;
  const auto t0 = Clock::now();
  const Manifest& m = *job.source.manifest;
  std::shared_ptr<ModelImage> image = job.image;
  if (!image) {  // an NVMe prefetch still needs memory to receive into; it is dropped after
    image = ModelImage::create(job.source.manifest, host_pool_.allocator(), &rec.status);
    if (!image) return rec;
    std::lock_guard lock(mu_);
    entries_[job.id].receiving = image;
  }
  const bool nvme = !config_.nvme_dir.empty();
  const std::string final_path = nvme ? nvme_path(job.id) : "";
  NvmeFill f{m, image, final_path, final_path + ".part", nvme ? config_.nvme_dir + "/" + job.id + ".chunks" : ""};
  if (nvme && file_size(f.final_path) == m.bytes) {
    rec.from = Tier::kNvme;
    rec.status = read_nvme_copy(f, pool_, config_.direct);
  } else if (nvme && !job.source.url.empty()) {
    rec.from = Tier::kRemote;
    rec.status = open_part_download(f, pool_, config_.direct);
  } else {
    rec.from = job.source.url.empty() ? Tier::kNone : Tier::kRemote;
  }
  rec.corrupt_chunks = f.corrupt.size();
  rec.direct = f.ds.direct;
  rec.io_uring = f.ds.io_uring;
  if (rec.status.ok() && !image->complete()) {
    if (job.source.url.empty()) {
      rec.status = no_tier_error(job.id, f.corrupt);
    } else {
      fetch_missing_chunks(f, job.source.url, pool_, config_.remote, rec);
    }
  }
  if (rec.status.ok() && f.out.data >= 0) rec.status = keep_nvme_file(f, rec.from);
  if (!rec.status.ok()) image->fail(rec.status);
  rec.bytes = m.bytes;
  rec.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return rec;
}

}  // namespace uma::store
