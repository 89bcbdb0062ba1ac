// read_secret_file: a secret (a password, an API key) from the first line of a file, never from
// the command line, where `ps` shows it to every user. Trailing CR and spaces are not part of it.
// kInvalidArgument naming `what` when the file cannot be read or its first line is empty.
// Threading: none (a plain read).
#pragma once

#include <fstream>
#include <string>

#include "common/status.h"

namespace uma {

inline Status read_secret_file(const std::string& file, const std::string& what, std::string* out) {
  std::ifstream f(file);
  std::string line;
  if (!f || !std::getline(f, line)) return {ErrorCode::kInvalidArgument, "cannot read the " + what + " file " + file};
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.empty()) return {ErrorCode::kInvalidArgument, "the " + what + " file " + file + " has an empty first line"};
  *out = std::move(line);
  return {};
}

}  // namespace uma
