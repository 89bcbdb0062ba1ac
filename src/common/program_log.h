// start_program_log: how every uma program logs, set once at the top of its main: spdlog to
// stderr under the program's name, ISO time to the millisecond, the level coloured on a terminal.
// Header-only, for programs (they link spdlog; uma_common does not).
#pragma once

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

namespace uma {

inline void start_program_log(const std::string& program, spdlog::level::level_enum level = spdlog::level::info) {
  spdlog::set_default_logger(spdlog::stderr_color_mt(program));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(level);
}

}  // namespace uma
