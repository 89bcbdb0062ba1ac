// ModelFront: one OpenAI-compatible endpoint over every model a ModelHost can serve (umad's model
// router: `umad --models-dir DIR` or several --model; docs/AGENT.md "umad with several models").
// A request's `model` picks the model; one not loaded is loaded first (the request waits, within
// the host's queue and start timeouts), then the request goes to that model's own umad on loopback
// as it came (method, path, body) and the answer comes back: a JSON answer whole, an SSE stream
// chunk by chunk as it arrives. llama-server's router mode and Ollama do the same: a process per
// model behind one port, so a model's crash or unload touches no other.
//   GET  /v1/models, /models   every model with its state ("unloaded" or the host's: queued,
//                              starting, loaded, unloading), bytes, and the Ollama-style fields
//   GET  /health               {"status":"ok","models":N,"loaded":K}
//   GET  /metrics              the host's counters (uma_agent_*) and this front's
//   GET  /api/tags, /api/ps    Ollama's listings: every model, and those loaded with their expiry
//   POST /api/pull             Ollama's pull: a model of the router's is here already (not loaded)
//   POST /api/generate, /api/chat with keep_alive 0 and no prompt (Ollama's unload): the model is
//                              unloaded (once idle), answered with done_reason "unload"
//   POST anything else         a JSON body naming `model`: relayed. Its `keep_alive` (Ollama's:
//                              seconds or "5m", negative: forever) sets how long the model stays
//                              loaded once idle, and is taken out of the body.
// Errors (OpenAI's shape): no `model`: 400 naming it; a model nobody has: 404 model_not_found; a
// load that fails: its error (503 for no room in time). A model unloaded between its load and its
// request's arrival (the child refuses an unload only while a request is in flight, so the window
// is real) is loaded again, once, when nothing had been sent to the client yet.
//
// Threading: the I/O thread (the host's and the server's). Ownership: the front owns its relays;
// a relay ends when its answer has been relayed, or its client has gone (checked on each piece
// relayed and every second), closing the connection to the model's umad, which then cancels the
// request.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "agent/model_host.h"
#include "common/status.h"
#include "httpkit/request_server.h"
#include "httpkit/upstream.h"

namespace uma::agent {

struct FrontModel {
  std::string id;
  std::uint64_t bytes = 0;
};

struct FrontCounters {
  std::uint64_t relayed = 0;        // requests relayed to a model
  std::uint64_t reloaded = 0;       // loaded again: the model went between its load and the request
  std::uint64_t failed = 0;         // answered with an error by the front (load failed, model gone)
  std::uint64_t client_gone = 0;    // relays cut short by their client leaving
};

class ModelFront {
 public:
  // `models`: every model it serves (what /v1/models lists). `upstream_key`: sent to the models'
  // umads (they take the front's --api-key-file too).
  // `webui`: GET / is the web page (webui/webui.h).
  ModelFront(boost::asio::io_context& io, ModelHost& host, std::vector<FrontModel> models, std::string upstream_key,
             bool webui = false);
  ~ModelFront();
  ModelFront(const ModelFront&) = delete;
  ModelFront& operator=(const ModelFront&) = delete;

  void start();  // the sweep for relays whose client went away
  void stop();   // ends every relay
  void handle(const HttpExchangePtr& ex);
  const FrontCounters& counters() const { return counters_; }

 private:
  class Relay;
  void list(const HttpExchangePtr& ex);
  // Ollama's own parts (model_front_ollama.cc): /api/tags and /api/ps from the host's table, and a
  // generate or chat with keep_alive 0 and nothing to run, which unloads the model. True when answered.
  bool ollama_get(const HttpExchangePtr& ex);
  bool ollama_unload(const HttpExchangePtr& ex, const std::string& model, const nlohmann::json& body,
                     std::optional<std::int64_t> keep_alive);
  void relay(const HttpExchangePtr& ex, std::string model, std::string body, std::optional<std::int64_t> keep_alive,
             int attempt);
  void relay_done(std::uint64_t id);
  void sweep();

  boost::asio::io_context& io_;
  ModelHost& host_;
  std::vector<FrontModel> models_;
  std::string upstream_key_;
  bool webui_ = false;
  UpstreamPool pool_{io_};  // kept-alive connections to the models' umads
  boost::asio::steady_timer sweep_timer_;
  std::map<std::uint64_t, std::unique_ptr<Relay>> relays_;
  std::uint64_t next_relay_ = 1;
  FrontCounters counters_;
  bool stopped_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace uma::agent
