// FanOut: when a model is asked for often enough, have more agents hold it in a fast tier before
// they need it (ServerlessLLM's locality), so its next load anywhere starts from
// DRAM or NVMe rather than the remote tier. A gateway counts each catalog model's requests (a rate
// decaying with `half_life`); once a model's rate reaches `min_rps`, loaders that hold it in no
// tier are asked to prefetch it (uma-agent's POST /prefetch, carried out by ColdLoads) until
// `copies` loaders hold it (the one serving it included), those whose remote fills are fastest
// first. Each (model, loader) is asked at most once per `every`; a prefetch is idempotent at the
// agent, so gateways that ask the same thing at once cost only a request.
//
// Pure (no I/O; the time is passed in): unit-tested on synthetic loaders (fan_out_test.cc).
// Thread-safety: none (the gateway's I/O thread). Bounds: one rate per catalog model the gateway
// has been asked for, and one entry per (model, loader) asked within `every`.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cluster/loader_state.h"

namespace uma::gateway {

struct FanOutOptions {
  std::int32_t copies = 2;  // loaders that should hold a busy model in a fast tier; 1 or less: off
  double min_rps = 1.0;     // a model's request rate that makes it busy
  std::string tier = "nvme";  // where the copies go: nvme | dram
  std::chrono::steady_clock::duration half_life = std::chrono::seconds(30);
  std::chrono::steady_clock::duration every = std::chrono::seconds(60);
};

class FanOut {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Prefetch {
    std::string model;
    std::string loader;  // its id
    bool operator==(const Prefetch&) const = default;
  };

  explicit FanOut(FanOutOptions options) : options_(std::move(options)) {}
  bool enabled() const { return options_.copies > 1; }
  const FanOutOptions& options() const { return options_; }

  void arrived(const std::string& model, TimePoint now);
  double rate(const std::string& model, TimePoint now) const;  // requests per second
  // The prefetches to ask for now, each noted as asked.
  std::vector<Prefetch> due(const std::vector<cluster::LoaderState>& loaders, TimePoint now);

 private:
  struct Rate {
    double weight = 0;  // decayed arrivals
    TimePoint at{};     // as of
  };
  double decayed(const Rate& r, TimePoint now) const;
  FanOutOptions options_;
  std::map<std::string, Rate> rates_;
  std::map<std::pair<std::string, std::string>, TimePoint> asked_;
};

}  // namespace uma::gateway
