// ConnectionTable: the daemon server's open connections and the requests they carry: connection
// ids, request ids (one counter for every front end), the request -> connection map events are
// routed by, and snapshots for sweeps and shutdown.
//
// Conn is the server's connection type; it needs `std::uint64_t id()`, `std::uint64_t request`
// (0: none in flight) and `std::int32_t choices` (how many ids from `request` on are its). Thread-safety: none; the server's I/O thread only. Ownership: the table
// holds a shared_ptr per open connection and per bound request; async operations hold their own,
// so removing a connection inside one of its callbacks never frees it there (it is freed after the
// last callback returns).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace uma {

template <typename Conn>
class ConnectionTable {
 public:
  using Ptr = std::shared_ptr<Conn>;
  bool empty() const { return conns_.empty(); }
  std::uint64_t next_conn_id() { return next_conn_++; }

  void add(const Ptr& c) { conns_[c->id()] = c; }
  void remove(const Ptr& c) { conns_.erase(c->id()); }
  // A new request on `c` made of `n` scheduler requests (its choices) with consecutive ids: the
  // first id; events for any of them find `c` until unbind().
  std::uint64_t bind(const Ptr& c, std::int32_t n = 1) {
    c->request = next_request_;
    c->choices = n;
    for (std::int32_t i = 0; i < n; ++i) by_request_[next_request_++] = c;
    return c->request;
  }
  void unbind(const Ptr& c) {
    for (std::int32_t i = 0; i < c->choices; ++i) by_request_.erase(c->request + static_cast<std::uint64_t>(i));
    c->request = 0;
    c->choices = 0;
  }
  Ptr find(std::uint64_t request) const {
    const auto it = by_request_.find(request);
    return it == by_request_.end() ? nullptr : it->second;
  }
  // The open connections, copied: closing one while walking them is safe.
  std::vector<Ptr> snapshot() const {
    std::vector<Ptr> all;
    all.reserve(conns_.size());
    for (const auto& [id, c] : conns_) all.push_back(c);
    return all;
  }

 private:
  std::uint64_t next_conn_ = 1;
  std::uint64_t next_request_ = 1;
  std::unordered_map<std::uint64_t, Ptr> conns_;
  std::unordered_map<std::uint64_t, Ptr> by_request_;
};

}  // namespace uma
