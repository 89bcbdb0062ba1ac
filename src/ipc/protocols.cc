// The two wire formats behind the Protocol interface.
#include "ipc/frame_codec.h"
#include "ipc/json_messages.h"
#include "ipc/line_decoder.h"
#include "ipc/newline_wire.h"
#include "ipc/protocol.h"
#include "ipc/wire.h"

namespace uma {
namespace {

std::string_view reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return wire::kReasonStop;
    case FinishReason::kLength: return wire::kReasonLength;
    case FinishReason::kCancelled: return wire::kReasonCancelled;
  }
  return wire::kReasonStop;
}

// newline: one prompt per line; the reply streams as escaped text and ends with '\n'.
class NewlineProtocol final : public Protocol {
 public:
  explicit NewlineProtocol(const ProtocolLimits& limits) : limits_(limits), rx_(limits.max_prompt_bytes) {}

  void feed(std::string_view bytes) override { rx_.feed(bytes); }
  std::size_t buffered() const override { return rx_.buffered(); }
  std::size_t max_buffered() const override { return limits_.max_prompt_bytes; }

  std::optional<InputAction> next(bool busy) override {
    if (busy) return std::nullopt;  // lines wait for the reply in flight
    std::optional<LineItem> item = rx_.next();
    if (!item) return std::nullopt;
    if (item->error != ErrorCode::kOk) {
      return InputError{item->error, std::string(newline_error_text(item->error)), {}, false, {}};
    }
    if (item->line == "/metrics") return MetricsInput{false};
    if (item->line == "/metrics/prometheus") return MetricsInput{true};
    StartInput s;
    s.request.prompt = std::move(item->line);
    // max_tokens 0: the daemon's default (--default-max-tokens), applied by the scheduler.
    s.request.sampling = limits_.sampling;
    return s;
  }

  void encode_token(ReplyState& reply, const Event& ev, std::string& out) override {
    append_escaped(out, ev.text);
    reply.line_open = true;
  }
  void encode_done(ReplyState& reply, const Event&, std::string& out) override {
    out += '\n';
    reply.line_open = false;
  }
  void encode_error(ReplyState* reply, const std::string&, const Status& error, std::string& out) override {
    const ErrorCode code = error.code();
    if (reply != nullptr && reply->line_open) out += '\n';
    if (reply != nullptr) reply->line_open = false;
    out += "error: ";
    out += newline_error_text(code);
    out += '\n';
  }
  void encode_metrics(const std::string& body, bool prometheus, std::string& out) override {
    out += body;
    if (!prometheus) out += '\n';  // Prometheus text already ends each line
  }

 private:
  ProtocolLimits limits_;
  LineDecoder rx_;
};

// uint32_le length | JSON.
class JsonProtocol final : public Protocol {
 public:
  explicit JsonProtocol(const ProtocolLimits& limits)
      : limits_(limits), rx_(limits.max_frame_bytes), request_limits_{limits.max_prompt_bytes} {}

  void feed(std::string_view bytes) override { rx_.feed(bytes); }
  std::size_t buffered() const override { return rx_.buffered(); }
  std::size_t max_buffered() const override { return limits_.max_frame_bytes + wire::kHeaderBytes; }

  std::optional<InputAction> next(bool) override {
    std::optional<FrameItem> frame = rx_.next();
    if (!frame) return std::nullopt;
    if (frame->error != ErrorCode::kOk) {
      return InputError{frame->error, "frame over the limit of " + std::to_string(limits_.max_frame_bytes) + " bytes",
                        {}, true, {}};
    }
    ClientMessage msg;
    std::string id;
    const Status st = parse_client_message(frame->payload, request_limits_, &msg, &id);
    if (!st.ok()) return InputError{st.code(), st.message(), id, true, st.param()};
    if (auto* m = std::get_if<WireMetricsRequest>(&msg)) return MetricsInput{m->prometheus};
    if (auto* c = std::get_if<WireCancel>(&msg)) return CancelInput{std::move(c->id)};
    WireRequest& w = std::get<WireRequest>(msg);
    StartInput s;
    s.client_id = std::move(w.id);
    s.stream = w.stream;
    s.keep_alive = w.keep_alive;
    s.metadata_json = std::move(w.metadata_json);
    s.request.prompt = std::move(w.prompt);
    s.request.max_tokens = w.max_tokens.value_or(0);  // 0: the daemon's default
    s.request.sampling = w.sampling;
    if (!w.json_schema.empty()) {
      // Turned into the grammar here, at the edge: a schema that cannot be is an error now.
      const Status gs = limits_.schema_to_grammar
                            ? limits_.schema_to_grammar(w.json_schema, &s.request.sampling.grammar)
                            : Status(ErrorCode::kBadRequest, "structured output is not available");
      if (!gs.ok()) return InputError{gs.code(), gs.message(), std::move(w.id), true, std::string(wire::kJsonSchema)};
    }
    s.request.stop = std::move(w.stop);
    s.request.slo_ttft_ms = w.slo_ttft_ms;
    s.request.slo_tbt_ms = w.slo_tbt_ms;
    s.request.priority = w.background ? Priority::kBackground : Priority::kInteractive;
    s.request.tenant = std::move(w.tenant);
    s.request.speculative = w.speculative;
    s.request.prediction = std::move(w.prediction);
    return s;
  }

  void encode_token(ReplyState& reply, const Event& ev, std::string& out) override {
    if (!reply.stream) {
      reply.text += ev.text;
      reply.logprob_entries.insert(reply.logprob_entries.end(), ev.logprobs.begin(), ev.logprobs.end());
      return;
    }
    append_frame(out, encode_token_event(reply.client_id, ev.text, ev.token_id, ev.logprobs));
  }
  void encode_done(ReplyState& reply, const Event& ev, std::string& out) override {
    EosFields f;
    f.reason = reason_name(ev.reason);
    f.prompt_tokens = ev.prompt_tokens;
    f.completion_tokens = ev.completion_tokens;
    f.queue_ms = ev.queue_ms;
    f.ttft_ms = ev.ttft_ms;
    f.total_ms = ev.total_ms;
    f.bytes_per_token = ev.bytes_per_token;
    f.prediction = reply.prediction;
    f.accepted_prediction_tokens = ev.accepted_prediction_tokens;
    f.rejected_prediction_tokens = ev.rejected_prediction_tokens;
    f.full_text = reply.stream ? nullptr : &reply.text;
    f.metadata_json = reply.metadata_json;
    f.with_logprobs = reply.logprobs;
    if (!reply.stream) reply.logprob_entries.insert(reply.logprob_entries.end(), ev.logprobs.begin(), ev.logprobs.end());
    f.logprobs = reply.stream ? std::span<const LogprobEntry>(ev.logprobs) : std::span<const LogprobEntry>(reply.logprob_entries);
    append_frame(out, encode_eos_event(reply.client_id, f));
  }
  void encode_error(ReplyState*, const std::string& client_id, const Status& error, std::string& out) override {
    append_frame(out, encode_error_event(client_id, error.code(), error.message(), error.param()));
  }
  void encode_metrics(const std::string& body, bool prometheus, std::string& out) override {
    append_frame(out, prometheus ? encode_metrics_text_event(body) : encode_metrics_event(body));
  }

 private:
  ProtocolLimits limits_;
  FrameDecoder rx_;
  RequestLimits request_limits_;
};

}  // namespace

std::unique_ptr<Protocol> make_protocol(ProtocolKind kind, const ProtocolLimits& limits) {
  if (kind == ProtocolKind::kNewline) return std::make_unique<NewlineProtocol>(limits);
  return std::make_unique<JsonProtocol>(limits);
}

}  // namespace uma
