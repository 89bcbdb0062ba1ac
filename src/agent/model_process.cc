#include "agent/model_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstring>

#include "agent/handover.h"

namespace uma::agent {

namespace {

constexpr int kImageFd = 3;
constexpr int kStatusFd = 4;
constexpr int kHandoverFd = 5;

// The command line after argv[0] that runs `spec`'s umad.
std::vector<std::string> command_line(const ProcessSpec& spec) {
  std::vector<std::string> args;
  if (spec.image_fd >= 0) {
    args.push_back("--model");
    args.push_back("/proc/self/fd/" + std::to_string(kImageFd));
  }
  args.insert(args.end(), spec.args.begin(), spec.args.end());
  args.push_back("--status-fd");
  args.push_back(std::to_string(kStatusFd));
  return args;
}

}  // namespace

Status ModelProcess::spawn(boost::asio::io_context& io, const ProcessSpec& spec, Listener listener,
                           std::unique_ptr<ModelProcess>* out) {
  std::vector<std::string> args = command_line(spec);
  args.insert(args.begin(), spec.program);
  return launch(io, std::move(args), spec.image_fd, -1, spec.log_path, std::move(listener), out);
}

Status ModelProcess::spawn_standby(boost::asio::io_context& io, const std::string& program, const std::string& log_path,
                                   Listener listener, std::unique_ptr<ModelProcess>* out) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return {ErrorCode::kIo, std::string("socketpair: ") + std::strerror(errno)};
  }
  std::vector<std::string> args = {program, "--standby-fd", std::to_string(kHandoverFd), "--status-fd", std::to_string(kStatusFd)};
  Status s = launch(io, std::move(args), -1, pair[1], log_path, std::move(listener), out);
  ::close(pair[1]);
  if (!s.ok()) {
    ::close(pair[0]);
    return s;
  }
  (*out)->handover_fd_ = pair[0];
  return {};
}

Status ModelProcess::hand_over(const ProcessSpec& spec, Listener listener) {
  if (handover_fd_ < 0 || !running() || exit_status_ >= 0) return {ErrorCode::kInternal, "no standby to hand over to"};
  Handover h;
  h.args = command_line(spec);
  h.image_fd = spec.image_fd;
  h.log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (h.log_fd < 0) return {ErrorCode::kIo, "cannot write " + spec.log_path + ": " + std::strerror(errno)};
  Status s = send_handover(handover_fd_, h);
  ::close(h.log_fd);
  ::close(handover_fd_);  // one handover: its end now sees EOF after the message
  handover_fd_ = -1;
  if (s.ok()) listener_ = std::move(listener);
  return s;
}

StatusEvent parse_status_event(std::string_view name) {
  static constexpr std::pair<std::string_view, StatusEvent> kNames[] = {
      {"standby", StatusEvent::kStandby}, {"pinned", StatusEvent::kPinned}, {"ready", StatusEvent::kReady},
      {"busy", StatusEvent::kBusy},       {"idle", StatusEvent::kIdle},     {"stopping", StatusEvent::kStopping}};
  for (const auto& [n, e] : kNames) {
    if (n == name) return e;
  }
  return StatusEvent::kUnknown;
}

Status ModelProcess::send_pin_set(const std::vector<int>& image_fds) {
  if (handover_fd_ < 0 || !running() || exit_status_ >= 0) return {ErrorCode::kInternal, "no standby to pin images"};
  return agent::send_pin_set(handover_fd_, image_fds);
}

Status ModelProcess::launch(boost::asio::io_context& io, std::vector<std::string> args, int image_fd, int handover_fd,
                            const std::string& log_path, Listener listener, std::unique_ptr<ModelProcess>* out) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return {ErrorCode::kIo, std::string("pipe: ") + std::strerror(errno)};
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return {ErrorCode::kIo, "cannot write " + log_path + ": " + std::strerror(errno)};
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: async-signal-safe calls only until exec. Descriptors are first moved above 5 so
    // the dup2s below cannot overwrite one another; dup2 clears close-on-exec on its target.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int image = image_fd >= 0 ? ::fcntl(image_fd, F_DUPFD_CLOEXEC, 10) : -1;
    const int handover = handover_fd >= 0 ? ::fcntl(handover_fd, F_DUPFD_CLOEXEC, 10) : -1;
    const int status = ::fcntl(pipefd[1], F_DUPFD_CLOEXEC, 10);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    if (image >= 0) ::dup2(image, kImageFd);
    ::dup2(status, kStatusFd);
    if (handover >= 0) ::dup2(handover, kHandoverFd);
    ::execv(argv[0], argv.data());
    static const char kMsg[] = "uma-agent: exec of umad failed\n";
    [[maybe_unused]] auto n = ::write(2, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  const int err = errno;
  ::close(pipefd[1]);
  ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) {
    ::close(pipefd[0]);
    return {ErrorCode::kIo, std::string("fork: ") + std::strerror(err)};
  }
  out->reset(new ModelProcess(io, pid, pipefd[0], std::move(listener)));
  (*out)->read();
  return {};
}

ModelProcess::ModelProcess(boost::asio::io_context& io, pid_t pid, int status_fd, Listener listener)
    : pid_(pid), status_(io, status_fd), listener_(std::move(listener)) {}

ModelProcess::~ModelProcess() {
  *alive_ = false;
  if (handover_fd_ >= 0) ::close(handover_fd_);
  signal(SIGKILL);
  boost::system::error_code ignored;
  status_.close(ignored);
}

void ModelProcess::read() {
  status_.async_read_some(boost::asio::buffer(buf_), [this, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
    if (!*alive) return;
    if (ec) return;  // EOF: the child closed its end (exiting); the reaper reports the exit
    pending_.append(buf_.data(), n);
    for (std::size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
      const std::string text = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      StatusLine line;
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) {
        spdlog::warn("umad {}: unreadable status line '{}'", pid_, text);
        continue;
      }
      line.event = parse_status_event(j["event"].get<std::string>());
      if (line.event == StatusEvent::kUnknown) {
        spdlog::warn("umad {}: unknown status event in '{}'", pid_, text);
        continue;
      }
      if (j.contains("http_port") && j["http_port"].is_number_unsigned()) line.http_port = j["http_port"].get<std::uint16_t>();
      if (j.contains("why") && j["why"].is_string()) line.why = j["why"].get<std::string>();
      if (j.contains("images") && j["images"].is_number_unsigned()) line.images = j["images"].get<int>();
      listener_(line);
      if (!*alive) return;  // the listener let go of this process
    }
    if (pending_.size() > 4096) pending_.clear();  // no line is this long: not umad speaking
    read();
  });
}

void ModelProcess::signal(int sig) {
  if (pid_ > 0 && exit_status_ < 0) ::kill(pid_, sig);
}

void ModelProcess::ask_unload() { signal(SIGUSR1); }
void ModelProcess::terminate() { signal(SIGINT); }
void ModelProcess::drain() { signal(SIGTERM); }

void ModelProcess::exited(int status) {
  exit_status_ = status;
}

std::string ModelProcess::describe_exit(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace uma::agent
