// RedisClient: one synchronous connection to a Redis server (hiredis), for the cluster layer's
// soft state. Every call has a deadline (connect and each command), so an unreachable or hung
// Redis costs the caller at most `timeout`, never a stuck thread; after any I/O error the
// connection is dropped and the next call dials again. Redis is never on a request's path.
//
// Thread-safety: none; one owner thread (the agent's heartbeat thread, a gateway's refresher).
// Errors are values: kIo when Redis cannot be reached or answers with an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"


struct redisContext;

namespace uma::cluster {

struct RedisAddress {
  RedisAddress() = default;
  RedisAddress(std::string h, int p, std::string u = "", std::string pw = "")
      : host(std::move(h)), port(p), user(std::move(u)), password(std::move(pw)) {}
  std::string host = "127.0.0.1";
  int port = 6379;
  // AUTH after every dial when the password is set (Redis `requirepass`, or an ACL user's).
  std::string user;      // empty: the default user
  std::string password;
};
// "HOST:PORT" (or "HOST", port 6379). False on a malformed text.
bool parse_redis_address(const std::string& text, RedisAddress* out);
// The password from the first line of `file` (never from the command line, where `ps` shows it),
// and the ACL user; kInvalidArgument when the file cannot be read or its first line is empty.
Status load_redis_credentials(const std::string& file, const std::string& user, RedisAddress* out);
// Every binary's --redis, --redis-password-file (empty: none) and --redis-user, in one place.
Status redis_address_from_flags(const std::string& host_port, const std::string& password_file, const std::string& user,
                                RedisAddress* out);
// Those flags' values (declared by cluster/redis_flags.h).
struct RedisFlags {
  std::string address = "127.0.0.1:6379";
  std::string password_file;  // empty: no password
  std::string user;           // empty: Redis's default user
  Status resolve(RedisAddress* out) const { return redis_address_from_flags(address, password_file, user, out); }
};

// One reply, reduced to what the cluster layer reads: a string (bulk or status), an integer, nil,
// or an array of those.
struct RedisReply {
  enum class Kind { kNil, kString, kInteger, kArray };
  Kind kind = Kind::kNil;
  std::string str;
  std::int64_t integer = 0;
  std::vector<RedisReply> elements;
};

class RedisClient {
 public:
  RedisClient(RedisAddress address, std::chrono::milliseconds timeout);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // One command (its arguments binary-safe). Dials first when not connected.
  Status command(const std::vector<std::string>& args, RedisReply* reply = nullptr);
  // Several commands in one round trip; `replies` gets one per command.
  Status pipeline(const std::vector<std::vector<std::string>>& commands, std::vector<RedisReply>* replies = nullptr);
  bool connected() const { return ctx_ != nullptr; }
  const RedisAddress& address() const { return address_; }

 private:
  Status dial();
  void drop();
  RedisAddress address_;
  std::chrono::milliseconds timeout_;
  redisContext* ctx_ = nullptr;
};

}  // namespace uma::cluster
