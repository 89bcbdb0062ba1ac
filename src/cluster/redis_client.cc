#include "cluster/redis_client.h"

#include "common/secret_file.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <charconv>
#include <fstream>

namespace uma::cluster {

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.kind = RedisReply::Kind::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.kind = RedisReply::Kind::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.kind = RedisReply::Kind::kArray;
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default: break;  // nil
  }
  return out;
}

}  // namespace

bool parse_redis_address(const std::string& text, RedisAddress* out) {
  const std::size_t colon = text.rfind(':');
  RedisAddress a;
  a.host = text.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string port = text.substr(colon + 1);
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), a.port);
    if (ec != std::errc() || end != port.data() + port.size() || a.port < 1 || a.port > 65535) return false;
  }
  if (a.host.empty()) return false;
  *out = a;
  return true;
}

Status load_redis_credentials(const std::string& file, const std::string& user, RedisAddress* out) {
  std::string password;
  if (Status s = read_secret_file(file, "Redis password", &password); !s.ok()) return s;
  out->user = user;
  out->password = std::move(password);
  return {};
}

Status redis_address_from_flags(const std::string& host_port, const std::string& password_file, const std::string& user,
                                RedisAddress* out) {
  if (!parse_redis_address(host_port, out)) return {ErrorCode::kInvalidArgument, "--redis: want HOST:PORT, got '" + host_port + "'"};
  if (password_file.empty()) {
    if (!user.empty()) return {ErrorCode::kInvalidArgument, "--redis-user needs --redis-password-file"};
    return {};
  }
  return load_redis_credentials(password_file, user, out);
}

RedisClient::RedisClient(RedisAddress address, std::chrono::milliseconds timeout)
    : address_(std::move(address)), timeout_(timeout) {}

RedisClient::~RedisClient() { drop(); }

void RedisClient::drop() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

Status RedisClient::dial() {
  if (ctx_ != nullptr) return Status::Ok();
  ctx_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, to_timeval(timeout_));
  if (ctx_ == nullptr || ctx_->err != 0) {
    const std::string why = ctx_ != nullptr ? ctx_->errstr : "out of memory";
    drop();
    return Status(ErrorCode::kIo, "redis " + address_.host + ":" + std::to_string(address_.port) + ": " + why);
  }
  redisSetTimeout(ctx_, to_timeval(timeout_));  // every later read and write
  if (!address_.password.empty()) {
    auto* r = static_cast<redisReply*>(address_.user.empty()
                                           ? redisCommand(ctx_, "AUTH %b", address_.password.data(), address_.password.size())
                                           : redisCommand(ctx_, "AUTH %b %b", address_.user.data(), address_.user.size(),
                                                          address_.password.data(), address_.password.size()));
    std::string why = r == nullptr ? std::string(ctx_->errstr) : r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "";
    if (r != nullptr) freeReplyObject(r);
    if (!why.empty()) {
      drop();
      return Status(ErrorCode::kIo, "redis " + address_.host + ":" + std::to_string(address_.port) + ": AUTH: " + why);
    }
  }
  return Status::Ok();
}

Status RedisClient::command(const std::vector<std::string>& args, RedisReply* reply) {
  std::vector<RedisReply> replies;
  Status st = pipeline({args}, &replies);
  if (st.ok() && reply != nullptr) *reply = std::move(replies.front());
  return st;
}

Status RedisClient::pipeline(const std::vector<std::vector<std::string>>& commands, std::vector<RedisReply>* replies) {
  if (Status st = dial(); !st.ok()) return st;
  for (const auto& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      drop();
      return Status(ErrorCode::kIo, "redis: cannot queue a command");
    }
  }
  if (replies != nullptr) replies->clear();
  Status first_error;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
      const std::string why = ctx_->errstr;
      drop();  // a timeout or a broken connection: dial again next time
      return Status(ErrorCode::kIo, "redis: " + why);
    }
    auto* r = static_cast<redisReply*>(raw);
    if (r->type == REDIS_REPLY_ERROR && first_error.ok()) {
      first_error = Status(ErrorCode::kIo, "redis: " + std::string(r->str, r->len));
    }
    if (replies != nullptr) replies->push_back(convert(r));
    freeReplyObject(r);
  }
  return first_error;
}

}  // namespace uma::cluster
