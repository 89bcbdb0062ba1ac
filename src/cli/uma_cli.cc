// uma-cli (newline protocol edition): sends one prompt and streams the reply to stdout.
//   uma-cli "prompt"          uma-cli < prompt.txt          uma-cli metrics
// Errors from the server go to stderr with exit code 1; connection problems exit 2.
#include <CLI/CLI.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "ipc/newline_wire.h"
#include "ipc/unix_connect.h"

namespace {

int connect_or_report(const std::string& path) {
  const int fd = uma::connect_unix(path);
  if (fd < 0) std::cerr << "uma-cli: cannot connect to " << path << ": " << std::strerror(errno) << "\n";
  return fd;
}

bool send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-cli: talk to umad over its Unix socket (newline protocol)"};
  std::string prompt;
  const char* env_sock = std::getenv("UMA_SOCK");
  std::string socket_path = env_sock ? env_sock : "/tmp/uma.sock";
  app.add_option("prompt", prompt, "prompt text, or 'metrics'; read from stdin when absent");
  app.add_option("-s,--socket", socket_path, "umad socket (env UMA_SOCK)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const bool metrics = prompt == "metrics";
  if (prompt.empty()) {
    prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    while (!prompt.empty() && (prompt.back() == '\n' || prompt.back() == '\r')) prompt.pop_back();
  }
  if (prompt.find('\n') != std::string::npos) {
    std::cerr << "uma-cli: the newline protocol carries one line; join the prompt's lines first\n";
    return 2;
  }
  const int fd = connect_or_report(socket_path);
  if (fd < 0) return 2;
  if (!send_all(fd, (metrics ? "/metrics" : prompt) + "\n")) {
    std::cerr << "uma-cli: send failed\n";
    return 2;
  }
  // Stream bytes as they come; a reply starting with "error: " is an error line.
  std::string head;  // first bytes, held until we know whether this is an error line
  std::string line_end;
  bool decided = false, is_error = false, ended = false;
  char buf[4096];
  while (!ended) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    std::string chunk(buf, static_cast<size_t>(n));
    const size_t nl = chunk.find('\n');
    if (nl != std::string::npos) {
      chunk.resize(nl);
      ended = true;
    }
    if (!decided) {
      head += chunk;
      if (head.size() < 7 && !ended) continue;
      decided = true;
      is_error = head.rfind("error: ", 0) == 0;
      chunk.swap(head);
    }
    if (is_error) std::cerr << chunk;
    else if (metrics) std::cout << chunk;
    else std::cout << uma::unescape_reply(chunk) << std::flush;
  }
  if (!decided && !head.empty()) std::cout << uma::unescape_reply(head);
  std::cout << "\n";
  ::close(fd);
  if (is_error) {
    std::cerr << "\n";
    return 1;
  }
  return ended ? 0 : 2;
}
