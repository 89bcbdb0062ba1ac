// Every binary's Redis flags, declared once, each with its UMA_* twin: --redis HOST:PORT,
// --redis-password-file (the password on its first line, never on a command line, where `ps`
// shows it) and --redis-user (an ACL user). Included by the programs' flag parsing only: the
// cluster layer itself does not know the command-line parser.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cluster/redis_client.h"

namespace uma::cluster {

inline constexpr const char* kRedisFlagGroup = "Cluster";

// --redis-password-file and --redis-user (uma-store's subcommands name --redis themselves).
inline void add_redis_credential_flags(CLI::App& app, RedisFlags& f) {
  app.add_option("--redis-password-file", f.password_file, "Redis's password (requirepass or an ACL user's): the first "
                 "line of this file")->envname("UMA_REDIS_PASSWORD_FILE")->check(CLI::ExistingFile)->group(kRedisFlagGroup);
  app.add_option("--redis-user", f.user, "the Redis ACL user the password is for")->envname("UMA_REDIS_USER")->group(kRedisFlagGroup);
}

// --redis (`what` says what this binary keeps there) and the credentials.
inline void add_redis_flags(CLI::App& app, RedisFlags& f, const std::string& what = "the cluster's Redis, HOST:PORT") {
  app.add_option("--redis", f.address, what)->envname("UMA_REDIS")->capture_default_str()->group(kRedisFlagGroup);
  add_redis_credential_flags(app, f);
}

}  // namespace uma::cluster
