#include "gateway/proxy.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "common/json_text.h"
#include "common/state_machine.h"
#include "gateway/gateway_server.h"
#include "http/openai.h"
#include "httpkit/http_wire.h"

namespace uma::gateway {

namespace {

const StateTable<ProxyState, 6>& proxy_states() {
  using S = ProxyState;
  static const StateTable<ProxyState, 6> table(
      "proxy", {"dispatching", "queued", "awaiting_model", "waiting", "relaying", "done"},
      {{S::kDispatching, {S::kWaiting, S::kQueued, S::kAwaitingModel, S::kDone}},
       {S::kQueued, {S::kDispatching, S::kDone}},
       {S::kAwaitingModel, {S::kDispatching, S::kDone}},
       {S::kWaiting, {S::kRelaying, S::kDispatching, S::kDone}},
       {S::kRelaying, {S::kDispatching, S::kDone}}});
  return table;
}

}  // namespace

Proxy::Proxy(GatewayServer& gw, HttpExchangePtr client, std::uint64_t id, ProxyJob job)
    : gw_(gw), client_(std::move(client)), id_(id), job_(std::move(job)) {}

Proxy::~Proxy() {
  if (up_) up_->abort();
}

void Proxy::set_state(ProxyState to) {
  const ProxyState from = state_;
  move_state(proxy_states(), state_, to, id_);
  if (from == ProxyState::kQueued && to == ProxyState::kDone) gw_.dequeue(this);
  if (from == ProxyState::kAwaitingModel && to != ProxyState::kAwaitingModel) gw_.stop_awaiting(this);
}

void Proxy::dispatch() {
  const bool woken = state_ == ProxyState::kQueued;
  if (state_ != ProxyState::kDispatching) set_state(ProxyState::kDispatching);
  AgentDirectory& agents = gw_.agents();
  DispatchFacts facts;
  facts.model = job_.model.empty() ? ModelLookup::kServed : agents.lookup(job_.model);
  facts.loads_on_demand = gw_.loads_on_demand();
  facts.woken = woken;
  facts.waiting = gw_.waiting();
  facts.max_waiting = gw_.max_waiting();
  DispatchStep step = decide_dispatch(facts);
  const auto now = SteadyClock::now();
  AgentDirectory::Candidates cs;
  gateway::RouteChoice choice;
  if (step == DispatchStep::kRoute) {
    agents.candidates(job_.model, job_.blocks, tried_, now, &cs);
    gateway::RouteRequest rr{job_.model, job_.prompt_tokens};
    choice = gateway::choose(gw_.config().policy, cs.list, rr, gw_.config().routing, gw_.rr_cursor());
    gw_.metrics().route_us.observe(std::chrono::duration<double, std::micro>(SteadyClock::now() - now).count());
    facts.routed = true;
    facts.chose = choice.index >= 0;
    facts.full = cs.full;
    step = decide_dispatch(facts);
  }
  switch (step) {
    case DispatchStep::kRoute: break;  // decided above
    case DispatchStep::kAwaitModel:
      set_state(ProxyState::kAwaitingModel);
      return gw_.await_model(this);
    case DispatchStep::kQueue: queued_at_ = now; [[fallthrough]];
    case DispatchStep::kQueueAgain:
      set_state(ProxyState::kQueued);
      return gw_.enqueue(this, step == DispatchStep::kQueueAgain);
    case DispatchStep::kOverloaded:
      gw_.metrics().overloaded_total++;
      return end_with_error(Status(ErrorCode::kOverloaded, facts.routed ? "every agent is full and " + std::to_string(facts.max_waiting) +
                                                                              " requests wait already"
                                                                        : std::to_string(facts.max_waiting) +
                                                                              " requests wait already (for room or for their model)"));
    case DispatchStep::kUnavailable:
      gw_.metrics().unavailable_total++;
      return end_with_error(Status(ErrorCode::kUnavailable, tried_.empty() ? "no agent is available" : "no agent left to serve this request"));
    case DispatchStep::kSend: break;
  }
  AgentLink& a = *cs.links[static_cast<std::size_t>(choice.index)];
  HostPort to;
  if (!parse_host_port(a.state().address, &to)) {
    tried_.insert(a.id());
    return dispatch();
  }
  agent_ = a.id();
  predicted_ = choice.predicted;
  cached_tokens_ = cs.list[static_cast<std::size_t>(choice.index)].cached_tokens;
  if (!client_head_sent_) ++attempts_;
  agents.dispatched(a, id_, job_.prompt_tokens - cached_tokens_, job_.blocks, now);
  status_ = 0;
  agent_stream_ = false;
  whole_.clear();
  sse_ = SseEvents();
  done_seen_ = false;
  dispatched_at_ = now;
  set_state(ProxyState::kWaiting);
  up_ = Upstream::start(gw_.io(), to, upstream_request(a), this, agents.options().upstream, &gw_.upstream_pool());
}

void Proxy::queue_expired() {
  if (state_ != ProxyState::kQueued) return;
  gw_.metrics().overloaded_total++;
  end_with_error(Status(ErrorCode::kOverloaded, "no agent had room within " + std::to_string(gw_.config().queue_timeout_ms) + " ms"));
}

void Proxy::model_wait_expired(const std::string& why) {
  if (state_ != ProxyState::kAwaitingModel) return;
  gw_.metrics().unavailable_total++;
  end_with_error(Status(ErrorCode::kUnavailable, "The model '" + job_.model + "' is not loaded anywhere yet: " + why, "model"));
}

// The client's body, asking the agent for token ids (what a resume continues after) and the
// completion's id; a resumed one also carries the tokens the client already has and what is left
// of max_tokens.
std::string Proxy::upstream_request(const AgentLink& a) const {
  HostPort to;
  parse_host_port(a.state().address, &to);  // the dispatch dialled it: it parses
  if (!job_.relay_target.empty()) {
    return http_request({.method = "POST", .target = job_.relay_target, .host = host_header(to), .body = job_.body,
                         .bearer = gw_.config().agent_key});
  }
  std::string body;
  if (emitted_.empty()) {
    nlohmann::json uma = {{"token_ids", true}, {"id", job_.completion_id}, {"created", job_.created}};
    if (!job_.prompt_ids.empty()) uma["prompt_tokens"] = job_.prompt_ids;
    body = job_.body;
    const std::size_t brace = body.find('{');  // the body is an object: route() checked it
    body.insert(brace + 1, "\"uma\":" + uma.dump() + ",");
  } else {
    nlohmann::json j = nlohmann::json::parse(job_.body);
    j["uma"] = {{"token_ids", true}, {"id", job_.completion_id}, {"created", job_.created}, {"resume", emitted_}};
    if (!job_.prompt_ids.empty()) j["uma"]["prompt_tokens"] = job_.prompt_ids;
    if (job_.max_tokens) {
      j["max_tokens"] = *job_.max_tokens - static_cast<std::int32_t>(emitted_.size());
      j.erase("max_completion_tokens");
    }
    body = j.dump();
  }
  return http_request({.method = "POST", .target = job_.chat ? "/v1/chat/completions" : "/v1/completions",
                       .host = host_header(to), .body = body, .bearer = gw_.config().agent_key});
}

// What the gateway adds before the agent can start: parsing, checking, rendering, tokenizing,
// routing and the connection to the agent (its first dispatch only).
void Proxy::on_sent() {
  if (attempts_ == 1 && resumes_ == 0 && moves_ == 0) {
    gw_.metrics().added_us.observe(std::chrono::duration<double, std::micro>(SteadyClock::now() - job_.received_at).count());
  }
}

void Proxy::on_head(unsigned status, bool streamed) {
  status_ = status;
  agent_stream_ = streamed;
  // A full agent (another gateway filled it): elsewhere or back to the queue, not a failure.
  if (status == 429) {
    if (up_) up_->abort();
    up_.reset();
    if (AgentLink* a = gw_.agents().find(agent_)) gw_.agents().refused_full(*a, SteadyClock::now());
    leave_agent();
    if (!client_head_sent_) --attempts_;
    gw_.metrics().agent_full_total++;
    return dispatch();
  }
  // An agent that cannot take it now (shutting down, broken) is one to try another for; 501 is its
  // answer (what the model cannot do: images without a projector, reranking on a non-reranker).
  if (status >= 500 && status != 501) {
    if (up_) up_->abort();
    return failover("the agent answered " + std::to_string(status));
  }
  set_state(ProxyState::kRelaying);
}

void Proxy::on_body(std::string_view bytes) {
  if (!job_.relay_target.empty() && status_ == 200 && agent_stream_) return relay_stream(bytes);
  if (!(status_ == 200 && agent_stream_ && job_.stream)) {
    whole_.append(bytes);
    return;
  }
  std::vector<SseEvent> events;
  if (Status st = sse_.feed(bytes, &events); !st.ok()) {
    if (up_) up_->abort();
    return failover(st.message());
  }
  std::string out;
  if (!client_head_sent_ && !events.empty()) {
    // The client's stream opens before its first event is encoded (a re-encoded Responses stream
    // numbers its events from the opening ones on).
    client_head_sent_ = true;
    out = event_stream_head(client_->keep_alive(), client_->cors(),
                            job_.reencoder ? job_.reencoder->stream_content_type() : "text/event-stream");
    if (job_.reencoder) out += job_.reencoder->open(job_.prompt_tokens);
  }
  for (const SseEvent& ev : events) {
    if (!first_token_ && !ev.tokens.empty()) {
      first_token_ = true;
      if (AgentLink* a = gw_.agents().find(agent_)) gw_.agents().first_byte(*a, id_);
      record_ttft();
    }
    emitted_.insert(emitted_.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.done) done_seen_ = true;
    out += job_.reencoder ? job_.reencoder->event(ev) : http_chunk(ev.forward);
  }
  if (out.empty()) return;
  client_->send_raw(out);
}

// A relayed stream (llama-server's /infill, Ollama's generate with a suffix): its events or lines
// as they come, in the client's chunks.
void Proxy::relay_stream(std::string_view bytes) {
  std::string out;
  if (!client_head_sent_) {
    client_head_sent_ = true;
    const std::string_view type = up_ ? up_->content_type() : std::string_view{};
    out = event_stream_head(client_->keep_alive(), client_->cors(), type.empty() ? "text/event-stream" : type);
  }
  if (!first_token_) {
    first_token_ = true;
    if (AgentLink* a = gw_.agents().find(agent_)) gw_.agents().first_byte(*a, id_);
  }
  out += http_chunk(bytes);
  client_->send_raw(out);
}

// Predicted vs measured, for a first dispatch only (a retry's or a resume's clock started later).
// The decision's parts go to the debug log: what the prediction error is made of.
void Proxy::record_ttft() {
  if (resumes_ != 0 || moves_ != 0 || attempts_ != 1) return;
  const double measured = std::chrono::duration<double>(SteadyClock::now() - dispatched_at_).count();
  gw_.record_ttft(predicted_.total(), measured);
  if (AgentLink* a = gw_.agents().find(agent_)) gw_.agents().measured(*a, predicted_, measured);
  spdlog::debug("route {} -> {}: prompt {} cached {} ahead {} of {} running {} of {} | predicted ({}) load {:.1f} queue {:.1f} prefill {:.1f} ms | "
                "measured {:.1f} ms",
                id_, agent_, job_.prompt_tokens, cached_tokens_, predicted_.ahead, predicted_.cluster_ahead, predicted_.running,
                predicted_.cluster_running, predicted_.fitted ? "fit" : "model",
                predicted_.load * 1e3, predicted_.queue * 1e3, predicted_.prefill * 1e3, measured * 1e3);
}

void Proxy::on_end() {
  up_.reset();
  AgentLink* a = gw_.agents().find(agent_);
  if (a != nullptr) gw_.agents().ended(*a, id_);
  if (status_ == 200 && agent_stream_ && !job_.relay_target.empty()) {
    if (a != nullptr) gw_.agents().succeeded(*a);
    client_->send_raw(kLastChunk);
    return done();
  }
  if (status_ == 200 && agent_stream_ && job_.stream) {
    if (!done_seen_) return failover("the agent's stream ended before [DONE]");
    if (a != nullptr) gw_.agents().succeeded(*a);
    client_->send_raw(kLastChunk);
    return done();
  }
  if (status_ == 200 && a != nullptr) gw_.agents().succeeded(*a);
  // Not a stream (or an error the agent answered whole): passed on as it came.
  if (status_ == 200 && !first_token_) record_ttft();
  if (job_.reencoder) whole_ = job_.reencoder->whole(status_, whole_);
  client_->send_raw(http_reply(status_, "application/json", whole_, client_->keep_alive(), client_->cors()));
  done();
}

void Proxy::on_failed(const std::string& why, bool) {
  if (AgentLink* a = gw_.agents().find(agent_)) gw_.agents().failed(*a, SteadyClock::now());
  failover(why);
}

void Proxy::agent_gone() {
  if (state_ != ProxyState::kWaiting && state_ != ProxyState::kRelaying) return;
  if (up_) up_->abort();
  failover("the agent stopped answering");
}

bool Proxy::migrate(const std::string& why, bool exclude) {
  if (state_ != ProxyState::kWaiting && state_ != ProxyState::kRelaying) return false;
  if (client_head_sent_ && !job_.resumable) return false;
  if (up_) up_->abort();
  spdlog::info("request {}: moving off agent {} ({})", id_, agent_, why);
  failover(why, /*planned=*/true, exclude);
  return true;
}

void Proxy::client_gone() {
  if (up_) up_->abort();
  up_.reset();
  leave_agent();
  if (state_ != ProxyState::kDone) set_state(ProxyState::kDone);
}

void Proxy::failover(const std::string& why, bool planned, bool exclude) {
  up_.reset();
  leave_agent();
  if (exclude) tried_.insert(agent_);
  if (planned) ++moves_;
  if (!client_head_sent_ && planned) {
    if (attempts_ > 0) --attempts_;  // a move is not one of the request's attempts
    return dispatch();
  }
  if (!client_head_sent_) {
    if (attempts_ < gw_.config().max_attempts) {
      spdlog::info("request {}: agent {} failed before its first byte ({}): sending it to another", id_, agent_, why);
      gw_.metrics().retries_total++;
      return dispatch();
    }
    gw_.metrics().failed_total++;
    return end_with_error(Status(ErrorCode::kUnavailable, "the agent failed: " + why));
  }
  if (!job_.resumable) {
    gw_.metrics().failed_total++;
    return end_with_error(Status(ErrorCode::kUnavailable, "the agent failed mid-stream (" + why +
                                                              ") and this request cannot resume elsewhere (n > 1, tools or logprobs)"));
  }
  if (!planned && resumes_ >= gw_.config().max_resumes) {
    gw_.metrics().failed_total++;
    return end_with_error(Status(ErrorCode::kUnavailable, "the agent failed mid-stream: " + why));
  }
  if (job_.max_tokens && static_cast<std::int32_t>(emitted_.size()) >= *job_.max_tokens && job_.reencoder) {
    // Every token was out; only the end was lost: the client's API closes as for length.
    SseEvent finish;
    finish.forward = R"(data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})";
    SseEvent last;
    last.done = true;
    client_->send_raw(job_.reencoder->event(finish) + job_.reencoder->event(last) + std::string(kLastChunk));
    return done();
  }
  if (job_.max_tokens && static_cast<std::int32_t>(emitted_.size()) >= *job_.max_tokens) {
    // Every token was out; only the finishing chunk was lost.
    nlohmann::ordered_json c = {{"id", job_.completion_id},
                                {"object", job_.chat ? "chat.completion.chunk" : "text_completion"},
                                {"created", job_.created},
                                {"model", "uma"}};
    c["choices"] = nlohmann::ordered_json::array();
    if (job_.chat) {
      c["choices"].push_back({{"index", 0}, {"delta", nlohmann::ordered_json::object()}, {"finish_reason", "length"}});
    } else {
      c["choices"].push_back({{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", "length"}});
    }
    client_->send_raw(sse_chunk(to_json_text(c)) + sse_chunk("[DONE]") + std::string(kLastChunk));
    return done();
  }
  spdlog::info("request {}: {} agent {} ({}) after {} tokens: resuming on another", id_, planned ? "leaving" : "failed mid-stream at",
               agent_, why, emitted_.size());
  if (!planned) ++resumes_;
  gw_.metrics().resumes_total++;
  dispatch();
}

void Proxy::end_with_error(const Status& st) {
  if (client_head_sent_ && job_.reencoder) {
    client_->send_raw(job_.reencoder->fail(st));
  } else if (client_head_sent_ && !job_.relay_target.empty() && job_.error_body) {
    // A relayed NDJSON stream (Ollama's): an error line, then its end.
    client_->send_raw(http_chunk(job_.error_body(st) + "\n") + std::string(kLastChunk));
  } else if (client_head_sent_) {
    // Mid-stream: an SSE error event, then the stream's end (never a silently short stream).
    client_->send_raw(sse_chunk(http_error_body(st)) + sse_chunk("[DONE]") + std::string(kLastChunk));
  } else {
    const std::string body = job_.reencoder    ? job_.reencoder->error_body(st)
                             : job_.error_body ? job_.error_body(st)
                                               : http_error_body(st);
    const unsigned status = http_status(st.code());
    client_->send_raw(http_reply(status, "application/json", body, client_->keep_alive(), client_->cors()));
  }
  done();
}

void Proxy::leave_agent() {
  if (AgentLink* a = gw_.agents().find(agent_)) gw_.agents().ended(*a, id_);
}

void Proxy::done() {
  // A send that dropped a slow client has ended this proxy already (client_gone).
  if (state_ == ProxyState::kDone) return;
  leave_agent();
  set_state(ProxyState::kDone);
  gw_.proxy_done(client_);
}

}  // namespace uma::gateway
