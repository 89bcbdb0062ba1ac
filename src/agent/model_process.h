// ModelProcess: one umad serving one model under the agent (docs/ARCHITECTURE.md "Many models per
// agent"). The agent forks and executes umad with the model's image as descriptor 3 (a memfd:
// `--model /proc/self/fd/3`, mapped in place on a CPU, so a start from the DRAM tier copies
// nothing) and a pipe as descriptor 4 (`--status-fd 4`) on which umad reports "ready" (with its
// HTTP port), "busy"/"idle" and "stopping" (daemon/supervisor_link.h). The child dies with the
// agent (PR_SET_PDEATHSIG), so no model outlives the process that accounts for its memory.
//
// A standby (spawn_standby) is a umad started before its model is known (daemon/standby.h): it
// readies its GPU contexts, says "standby", and hand_over() later makes it the model's umad with
// the same command line spawn() would have run, over a socket pair as descriptor 5.
//
// Exit is seen by the agent's SIGCHLD reaper (agent/model_host.h), which calls exited(): the
// status pipe's EOF only ends the reading.
// Threading: the I/O thread of `io` only. Ownership: the agent owns it; the destructor kills a
// child still running (SIGKILL) and reaps nothing (the reaper does).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace uma::agent {

struct ProcessSpec {
  std::string program;             // umad
  std::vector<std::string> args;   // after argv[0]; --status-fd and --model (with an image) are added
  int image_fd = -1;               // a memfd with the model's bytes, or -1: args name the model
  std::string log_path;            // the child's stdout and stderr (truncated)
};

// What a status line says, parsed once where it is read.
enum class StatusEvent : std::uint8_t { kUnknown, kStandby, kPinned, kReady, kBusy, kIdle, kStopping };
StatusEvent parse_status_event(std::string_view name);

// One status line from the child.
struct StatusLine {
  StatusEvent event = StatusEvent::kUnknown;
  std::uint16_t http_port = 0;
  int images = 0;  // pinned: how many of the pin set the standby holds pinned
  std::string why;
};

class ModelProcess {
 public:
  using Listener = std::function<void(const StatusLine&)>;
  // Starts the child; `listener` hears its status lines (never after the ModelProcess is gone).
  static Status spawn(boost::asio::io_context& io, const ProcessSpec& spec, Listener listener,
                      std::unique_ptr<ModelProcess>* out);
  // Starts a standby umad (no model yet); `listener` hears its "standby" line.
  static Status spawn_standby(boost::asio::io_context& io, const std::string& program, const std::string& log_path,
                              Listener listener, std::unique_ptr<ModelProcess>* out);
  // Makes this standby the umad `spec` describes (spec.program is not used: it is running);
  // `listener` hears its lines from now on. Fails when this is no standby or it is gone.
  Status hand_over(const ProcessSpec& spec, Listener listener);
  bool is_standby() const { return handover_fd_ >= 0; }
  // Tells this standby the images to keep pinned (agent/handover.h); it answers "pinned".
  Status send_pin_set(const std::vector<int>& image_fds);
  ~ModelProcess();
  ModelProcess(const ModelProcess&) = delete;
  ModelProcess& operator=(const ModelProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void ask_unload();  // SIGUSR1: umad stops if no request is in flight, else answers "busy"
  void terminate();   // SIGINT: umad ends its streams with an error and stops
  void drain();       // SIGTERM: with --drain-sec umad lets its streams end or move first, then stops
  // The reaper saw it exit with wait status `status`: no signal is sent from here on.
  void exited(int status);
  int exit_status() const { return exit_status_; }
  static std::string describe_exit(int status);  // "exit 0", "killed by signal 9", ...

 private:
  ModelProcess(boost::asio::io_context& io, pid_t pid, int status_fd, Listener listener);
  // fork and exec `args` (argv[0] first) with the image as descriptor 3, the status pipe as 4 and,
  // when >= 0, a standby's end of its socket pair as 5.
  static Status launch(boost::asio::io_context& io, std::vector<std::string> args, int image_fd, int handover_fd,
                       const std::string& log_path, Listener listener, std::unique_ptr<ModelProcess>* out);
  void read();
  void signal(int sig);

  pid_t pid_;
  int exit_status_ = -1;
  int handover_fd_ = -1;  // a standby's socket to it, until the handover
  boost::asio::posix::stream_descriptor status_;
  Listener listener_;
  std::array<char, 512> buf_{};
  std::string pending_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace uma::agent
