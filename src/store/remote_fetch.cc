#include "store/remote_fetch.h"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <vector>

namespace uma::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kFirstBackoff{50};
constexpr milliseconds kMaxBackoff{2000};
// The multi loop wakes at least this often even with nothing to do (a missed wakeup costs this).
constexpr milliseconds kMaxPoll{1000};

std::once_flag g_curl_once;
CURLcode g_curl_init = CURLE_OK;

// What the verify pool's callbacks share with the curl-driving thread. Held by shared_ptr in every
// callback, so a callback that runs late never touches freed memory; fetch_remote still waits for
// `outstanding` to reach 0 before it returns (the callbacks use `on_verified`, `stats` and `multi`,
// which the caller owns).
struct Shared {
  struct Result {
    std::size_t chunk;
    Status status;
    bool corrupt;  // a hash mismatch: fetch again; otherwise a non-ok status is fatal
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Result> results;  // under mu
  int outstanding = 0;         // verify jobs submitted and not yet reported; under mu
  CURLM* multi = nullptr;      // woken under mu (curl_multi_wakeup is thread-safe)
  std::atomic<bool> cancelled{false};
  const ChunkCallback* on_verified = nullptr;
  RemoteStats* stats = nullptr;
};

enum class ChunkState : std::uint8_t { kPending, kActive, kVerifying, kDone };

struct ChunkWork {
  ChunkState state = ChunkState::kPending;
  std::uint64_t offset = 0, size = 0;
  std::uint64_t received = 0;  // bytes in place, contiguous from offset
  int stalls = 0;              // consecutive broken attempts that delivered nothing
  int corrupt = 0;             // hash mismatches (never reset: a corrupt server must not loop forever)
  milliseconds backoff{0};
  Clock::time_point not_before{};
  std::string last_error;
};

// One easy handle and what its current attempt saw.
struct Transfer {
  CURL* easy = nullptr;
  std::size_t chunk = 0;
  std::uint64_t start = 0, end = 0;  // the range asked, inclusive, absolute
  bool whole_file = false;
  std::uint64_t got = 0;             // body bytes this attempt put in place
  bool checked = false;              // the response's status and range were looked at
  std::string error;                 // why the write callback refused the body
  bool fatal = false;                // ... and retrying cannot help
  bool overflow = false;             // more body than asked: this attempt's bytes are not kept
  long range_start = -1, range_end = -1;
  long long range_total = -1;
  ChunkWork* work = nullptr;
  std::uint8_t* dest = nullptr;  // the chunk's first byte in the image
  RemoteStats* stats = nullptr;
  std::uint64_t file_bytes = 0;
  char errbuf[CURL_ERROR_SIZE] = {};
};

long response_code(CURL* easy) {
  long code = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

// Content-Range: bytes A-B/T (T may be '*'). Reset at every status line (redirects, 100-continue).
size_t on_header(char* buf, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  const std::string_view line(buf, size * n);
  if (line.starts_with("HTTP/")) {
    t->range_start = t->range_end = -1;
    t->range_total = -1;
  } else if (line.size() > 14 && strncasecmp(line.data(), "content-range:", 14) == 0) {
    const std::string v(line.substr(14));
    unsigned long long a = 0, b = 0, total = 0;
    char star = 0;
    if (std::sscanf(v.c_str(), " bytes %llu-%llu/%llu", &a, &b, &total) == 3) {
      t->range_total = static_cast<long long>(total);
    } else if (std::sscanf(v.c_str(), " bytes %llu-%llu/%c", &a, &b, &star) != 3 || star != '*') {
      return size * n;  // unparsable: the range check below refuses the body
    }
    t->range_start = static_cast<long>(a);
    t->range_end = static_cast<long>(b);
  }
  return size * n;
}

// Decides, before the first body byte lands, whether this response may be written into the chunk:
// sets t->error (and t->fatal when asking again cannot help) when not.
void check_response(Transfer* t) {
  const long code = response_code(t->easy);
  if (code >= 400 && code < 500) {
    t->error = "HTTP " + std::to_string(code);
    t->fatal = true;
  } else if (code == 200) {
    if (!t->whole_file) t->error = "HTTP 200 to a Range request (the server ignores Range)";
  } else if (code != 206) {
    t->error = "HTTP " + std::to_string(code);
  } else if (t->range_total >= 0 && static_cast<std::uint64_t>(t->range_total) != t->file_bytes) {
    t->error = "the server's file has " + std::to_string(t->range_total) + " bytes, the manifest says " +
               std::to_string(t->file_bytes);
    t->fatal = true;  // another file: asking again cannot help
  } else if (t->range_start != static_cast<long>(t->start) || t->range_end != static_cast<long>(t->end)) {
    t->error = "HTTP 206 with Content-Range " + std::to_string(t->range_start) + "-" + std::to_string(t->range_end) +
               ", asked " + std::to_string(t->start) + "-" + std::to_string(t->end);
  }
}

size_t on_body(char* buf, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  const std::size_t len = size * n;
  if (!t->checked) {
    t->checked = true;
    check_response(t);  // sets t->error when the body must not land in the chunk
  }
  if (!t->error.empty()) return 0;  // CURLE_WRITE_ERROR ends the attempt
  ChunkWork& w = *t->work;
  if (len > w.size - w.received) {  // never past the chunk: a server that sends more is wrong
    t->error = "the server sent more than the " + std::to_string(t->end - t->start + 1) + " bytes asked";
    t->overflow = true;
    return 0;
  }
  if (t->got == 0 && w.received > 0 && len > 0 && t->stats) {
    // A broken transfer goes on from its last byte: counted once it delivers (not per retry).
    ++t->stats->resumed_transfers;
    t->stats->resumed_bytes_kept += w.received;
  }
  std::memcpy(t->dest + w.received, buf, len);
  w.received += len;
  t->got += len;
  if (t->stats) t->stats->bytes_received += len;
  return len;
}

std::string without_query(const std::string& url) {
  // Presigned URLs carry credentials in the query: keep them out of statuses and logs.
  const auto q = url.find('?');
  return q == std::string::npos ? url : url.substr(0, q) + "?...";
}

class Fetcher {
 public:
  Fetcher(const std::string& url, std::shared_ptr<ModelImage> image, VerifyPool& pool, const RemoteOptions& o,
          const ChunkCallback& on_verified, RemoteStats* stats)
      : url_(url), shown_url_(without_query(url)), image_(std::move(image)), pool_(pool), opt_(o),
        shared_(std::make_shared<Shared>()) {
    shared_->on_verified = on_verified ? &on_verified : nullptr;
    shared_->stats = stats;
    max_attempts_ = std::max(1, opt_.max_attempts);
  }

  ~Fetcher() {
    // Verify jobs still queued call curl_multi_wakeup and the caller's callback: wait them out.
    std::unique_lock lock(shared_->mu);
    shared_->cv.wait(lock, [&] { return shared_->outstanding == 0; });
    shared_->multi = nullptr;
    lock.unlock();
    for (auto& t : transfers_) {
      if (t->work != nullptr) curl_multi_remove_handle(multi_, t->easy);
      curl_easy_cleanup(t->easy);
    }
    if (headers_) curl_slist_free_all(headers_);
    if (multi_) curl_multi_cleanup(multi_);
  }

  Status run();

 private:
  Status setup();
  Status start_ready(Clock::time_point now);
  Status start(ChunkWork& w, std::size_t i);
  Status finish(Transfer* t, CURLcode res);
  Status broken(ChunkWork& w, std::size_t i, std::uint64_t got, std::string why);
  Status drain_results();
  void submit_verify(std::size_t i);
  Status fatal(Status s);
  std::string chunk_name(std::size_t i) const { return shown_url_ + ": chunk " + std::to_string(i); }

  const std::string url_, shown_url_;
  std::shared_ptr<ModelImage> image_;
  VerifyPool& pool_;
  const RemoteOptions& opt_;
  std::shared_ptr<Shared> shared_;
  int max_attempts_ = 1;
  CURLM* multi_ = nullptr;
  curl_slist* headers_ = nullptr;
  std::vector<ChunkWork> work_;
  std::vector<std::unique_ptr<Transfer>> transfers_;  // every easy handle made; reused
  std::vector<Transfer*> idle_;
  int active_ = 0;
  std::size_t done_ = 0;
};

Status Fetcher::setup() {
  std::call_once(g_curl_once, [] { g_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (g_curl_init != CURLE_OK) {
    return {ErrorCode::kIo, std::string("curl_global_init: ") + curl_easy_strerror(g_curl_init)};
  }
  multi_ = curl_multi_init();
  if (multi_ == nullptr) return {ErrorCode::kIo, "curl_multi_init failed"};
  // Separate TCP connections, not HTTP/2 streams on one: parallel connections are what fill a
  // long fat link (one TCP window each), as S3 and CDN clients do.
  curl_multi_setopt(multi_, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_NOTHING));
  const int conns = std::max(1, opt_.connections);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(conns));
  if (!opt_.bearer_token.empty()) {
    headers_ = curl_slist_append(nullptr, ("Authorization: Bearer " + opt_.bearer_token).c_str());
    if (headers_ == nullptr) return {ErrorCode::kIo, "curl_slist_append failed"};
  }
  std::lock_guard lock(shared_->mu);
  shared_->multi = multi_;
  return {};
}

Status Fetcher::run() {
  if (Status s = image_->status(); !s.ok()) return s;
  if (Status s = setup(); !s.ok()) return fatal(std::move(s));
  const Manifest& m = image_->manifest();
  work_.resize(m.chunk_count());
  for (std::size_t i = 0; i < work_.size(); ++i) {
    work_[i].offset = m.chunk_offset(i);
    work_[i].size = m.chunk_size(i);
    work_[i].backoff = kFirstBackoff;
    if (image_->is_ready(i)) {
      work_[i].state = ChunkState::kDone;
      ++done_;
    }
  }
  while (done_ < work_.size()) {
    if (opt_.cancel != nullptr && opt_.cancel->load()) return fatal({ErrorCode::kShuttingDown, "the model store is stopping"});
    const auto now = Clock::now();
    if (Status s = start_ready(now); !s.ok()) return fatal(std::move(s));
    int running = 0;
    if (CURLMcode mc = curl_multi_perform(multi_, &running); mc != CURLM_OK) {
      return fatal({ErrorCode::kIo, std::string("curl_multi_perform: ") + curl_multi_strerror(mc)});
    }
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
      if (Status s = finish(t, msg->data.result); !s.ok()) return fatal(std::move(s));
    }
    if (Status s = drain_results(); !s.ok()) return fatal(std::move(s));
    if (done_ == work_.size()) break;
    // Sleep until a socket moves, a verify result arrives (curl_multi_wakeup) or a backoff ends.
    auto wait = kMaxPoll;
    const auto later = Clock::now();
    for (const auto& w : work_) {
      if (w.state != ChunkState::kPending) continue;
      if (active_ >= std::max(1, opt_.connections)) break;  // a finished transfer wakes the poll
      // Rounded up: a backoff 0.4 ms away must not become a poll of 0 ms, spinning.
      wait = std::min(wait, std::chrono::ceil<milliseconds>(std::max(w.not_before - later, Clock::duration{})));
    }
    if (CURLMcode mc = curl_multi_poll(multi_, nullptr, 0, static_cast<int>(wait.count()), nullptr); mc != CURLM_OK) {
      return fatal({ErrorCode::kIo, std::string("curl_multi_poll: ") + curl_multi_strerror(mc)});
    }
  }
  return {};
}

Status Fetcher::start_ready(Clock::time_point now) {
  const int conns = std::max(1, opt_.connections);
  for (std::size_t i = 0; i < work_.size() && active_ < conns; ++i) {
    ChunkWork& w = work_[i];
    if (w.state != ChunkState::kPending || w.not_before > now) continue;
    if (Status s = start(w, i); !s.ok()) return s;
  }
  return {};
}

Status Fetcher::start(ChunkWork& w, std::size_t i) {
  Transfer* t = nullptr;
  if (!idle_.empty()) {
    t = idle_.back();
    idle_.pop_back();
  } else {
    auto owned = std::make_unique<Transfer>();
    owned->easy = curl_easy_init();
    if (owned->easy == nullptr) return {ErrorCode::kIo, "curl_easy_init failed"};
    CURL* e = owned->easy;
    t = owned.get();
    transfers_.push_back(std::move(owned));
    curl_easy_setopt(e, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for resolver timeouts
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opt_.connect_timeout.count()));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(opt_.low_speed_bytes_s));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(opt_.low_speed_time.count()));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);  // CDNs and object stores redirect; curl drops
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);       // our Authorization on another host
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    if (headers_) curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers_);
  }
  t->chunk = i;
  t->work = &w;
  t->dest = image_->data() + w.offset;
  t->stats = shared_->stats;
  t->file_bytes = image_->manifest().bytes;
  t->start = w.offset + w.received;
  t->end = w.offset + w.size - 1;
  t->whole_file = t->start == 0 && t->end + 1 == t->file_bytes;
  t->got = 0;
  t->checked = false;
  t->fatal = false;
  t->overflow = false;
  t->error.clear();
  t->range_start = t->range_end = -1;
  t->range_total = -1;
  t->errbuf[0] = '\0';
  const std::string range = std::to_string(t->start) + "-" + std::to_string(t->end);
  curl_easy_setopt(t->easy, CURLOPT_RANGE, range.c_str());  // curl copies it
  if (CURLMcode mc = curl_multi_add_handle(multi_, t->easy); mc != CURLM_OK) {
    t->work = nullptr;
    idle_.push_back(t);
    return {ErrorCode::kIo, std::string("curl_multi_add_handle: ") + curl_multi_strerror(mc)};
  }
  w.state = ChunkState::kActive;
  ++active_;
  return {};
}

Status Fetcher::finish(Transfer* t, CURLcode res) {
  curl_multi_remove_handle(multi_, t->easy);
  ChunkWork& w = *t->work;
  const std::size_t i = t->chunk;
  t->work = nullptr;
  idle_.push_back(t);
  --active_;
  const long code = response_code(t->easy);
  if (!t->checked && res == CURLE_OK) {  // an empty body: the write callback never ran
    t->checked = true;
    check_response(t);
  }
  if (t->fatal) return {ErrorCode::kIo, chunk_name(i) + ": " + t->error};
  if (code >= 400 && code < 500) return {ErrorCode::kIo, chunk_name(i) + ": HTTP " + std::to_string(code)};
  if (t->overflow) {  // a server that says one thing and sends another: keep nothing of it
    w.received -= t->got;
    t->got = 0;
  }
  // All bytes in place (even if the connection broke after the last one): the hash decides.
  if (t->error.empty() && w.received == w.size) {
    w.state = ChunkState::kVerifying;
    submit_verify(i);
    return {};
  }
  std::string why;
  if (!t->error.empty()) {
    why = t->error;
  } else if (res != CURLE_OK) {
    why = std::string(curl_easy_strerror(res)) + (t->errbuf[0] ? std::string(": ") + t->errbuf : "");
  } else if (code >= 500) {
    why = "HTTP " + std::to_string(code);
  } else {
    why = "the response ended " + std::to_string(w.size - w.received) + " bytes short";
  }
  return broken(w, i, t->got, std::move(why));
}

// A transfer that ended early keeps its bytes and resumes after a backoff; attempts that brought
// nothing count toward max_attempts.
Status Fetcher::broken(ChunkWork& w, std::size_t i, std::uint64_t got, std::string why) {
  w.last_error = std::move(why);
  if (got > 0) {
    w.stalls = 0;
    w.backoff = kFirstBackoff;
  } else {
    ++w.stalls;
  }
  if (w.stalls + w.corrupt >= max_attempts_) {
    return {ErrorCode::kIo, chunk_name(i) + ": " + std::to_string(w.stalls + w.corrupt) +
                                " attempts failed without progress; last: " + w.last_error};
  }
  w.state = ChunkState::kPending;
  w.not_before = Clock::now() + w.backoff;
  w.backoff = std::min(w.backoff * 2, kMaxBackoff);
  return {};
}

void Fetcher::submit_verify(std::size_t i) {
  {
    std::lock_guard lock(shared_->mu);
    ++shared_->outstanding;
  }
  // Runs on a pool thread: no curl here except the thread-safe wakeup.
  pool_.submit(image_, i, [sh = shared_, img = image_, i](Status s) {
    Shared::Result r{i, Status{}, false};
    if (sh->cancelled) {
      r.status = {ErrorCode::kIo, "cancelled"};
    } else if (!s.ok()) {
      if (sh->stats) ++sh->stats->corrupt_chunks;
      r.status = std::move(s);
      r.corrupt = true;
    } else {
      if (sh->on_verified) r.status = (*sh->on_verified)(i, img->chunk(i));
      if (r.status.ok()) {
        img->chunk_ready(i);
        if (sh->stats) ++sh->stats->chunks_fetched;
      }
    }
    {
      std::lock_guard lock(sh->mu);
      sh->results.push_back(std::move(r));
      --sh->outstanding;
      if (sh->multi) curl_multi_wakeup(sh->multi);
    }
    sh->cv.notify_all();
  });
}

Status Fetcher::drain_results() {
  std::deque<Shared::Result> results;
  {
    std::lock_guard lock(shared_->mu);
    results.swap(shared_->results);
  }
  for (auto& r : results) {
    ChunkWork& w = work_[r.chunk];
    if (r.status.ok()) {
      w.state = ChunkState::kDone;
      ++done_;
      continue;
    }
    if (!r.corrupt) return r.status;  // on_verified refused the chunk (a tier write failed, say)
    // Fetch it again from its start: these bytes are wrong somewhere.
    ++w.corrupt;
    w.received = 0;
    w.last_error = r.status.message();
    if (w.stalls + w.corrupt >= max_attempts_) {
      return {ErrorCode::kIo, chunk_name(r.chunk) + ": " + std::to_string(w.stalls + w.corrupt) +
                                  " attempts failed; last: " + w.last_error};
    }
    w.state = ChunkState::kPending;
    w.not_before = Clock::now();
  }
  return {};
}

Status Fetcher::fatal(Status s) {
  shared_->cancelled = true;
  image_->fail(s);
  return s;
}

}  // namespace

bool remote_tier_available() { return true; }

Status fetch_remote(const std::string& url, const std::shared_ptr<ModelImage>& image, VerifyPool& pool,
                    const RemoteOptions& options, const ChunkCallback& on_verified, RemoteStats* stats) {
  if (!image) return {ErrorCode::kInternal, "fetch_remote without an image"};
  Fetcher f(url, image, pool, options, on_verified, stats);
  return f.run();  // ~Fetcher waits for the verify jobs still out
}

}  // namespace uma::store
