// A blocking client connection to a Unix stream socket, for clients (uma-cli, tests) and for the
// daemon's "is someone already serving here?" probe.
#pragma once

#include <string>

namespace uma {

// Returns a connected, close-on-exec socket fd, or -1 with errno set.
int connect_unix(const std::string& path);

}  // namespace uma
