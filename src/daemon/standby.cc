#include "daemon/standby.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "agent/handover.h"
#include "runtime/host_pins.h"
#include "runtime/llama_runtime.h"

namespace uma {

namespace {

constexpr int kImageFd = 3;  // where a spawned umad finds its image (agent/model_process.h)

bool parse_fd(const char* text, int* fd) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 0 || v > (1 << 20)) return false;
  *fd = static_cast<int>(v);
  return true;
}

void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  for (std::size_t at = 0; at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the agent is gone: the handover's wait will see it too
    at += static_cast<std::size_t>(n);
  }
}

}  // namespace

bool is_standby(int argc, char** argv) { return argc >= 2 && std::strcmp(argv[1], "--standby-fd") == 0; }

Status await_handover(int argc, char** argv, std::vector<std::string>* args) {
  args->clear();
  int socket_fd = -1, status_fd = -1;
  if (argc != 5 || !parse_fd(argv[2], &socket_fd) || std::strcmp(argv[3], "--status-fd") != 0 || !parse_fd(argv[4], &status_fd)) {
    return {ErrorCode::kInvalidArgument, "usage: umad --standby-fd N --status-fd S (uma-agent starts it so)"};
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int gpus = warm_gpu_backends();
  spdlog::info("standby: backends ready, {} GPU context(s) in {:.3f} s", gpus,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  write_line(status_fd, R"({"event":"standby"})");
  HostPins& pins = process_host_pins();
  agent::Handover h;
  for (;;) {
    agent::StandbyMessage m;
    bool closed = false;
    if (Status st = agent::receive_standby_message(socket_fd, &m, &closed); !st.ok() || closed) {
      ::close(socket_fd);
      return st;
    }
    if (!m.is_pin_set) {
      h = std::move(m.handover);
      break;
    }
    const auto p0 = std::chrono::steady_clock::now();
    const int pinned = pins.set(m.images);
    for (int fd : m.images) ::close(fd);  // a mapping keeps its memfd
    spdlog::info("standby: {} of {} image(s) pinned in {:.3f} s", pinned, m.images.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count());
    write_line(status_fd, R"({"event":"pinned","images":)" + std::to_string(pinned) + "}");
  }
  ::close(socket_fd);
  // Only the handed image's pin is of use now (its load takes it: runtime/image_loader.h).
  const auto r0 = std::chrono::steady_clock::now();
  const std::size_t before = pins.size();
  pins.keep_only(h.image_fd);
  if (before > 0) {
    spdlog::info("standby: {} pin(s) of other images released in {:.3f} s", before - pins.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count());
  }
  // Its own log from here on, and the image where --model /proc/self/fd/3 finds it.
  ::dup2(h.log_fd, STDOUT_FILENO);
  ::dup2(h.log_fd, STDERR_FILENO);
  ::close(h.log_fd);
  if (h.image_fd >= 0 && h.image_fd != kImageFd) {
    ::dup2(h.image_fd, kImageFd);  // dup2 leaves close-on-exec off the copy: a re-exec keeps it
    ::close(h.image_fd);
  }
  args->push_back(argv[0]);
  args->insert(args->end(), h.args.begin(), h.args.end());
  spdlog::info("standby: handed over, {} arguments", h.args.size());
  return {};
}

}  // namespace uma
