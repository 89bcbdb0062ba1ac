#include "sched/embed_queue.h"

#include <algorithm>

namespace uma {

void EmbedQueue::add(const Decoder& decoder, Request request, std::vector<Event>& out) {
  const std::int32_t most = decoder.embed_max_tokens();
  if (most <= 0) return out.push_back(error_event(request.id, Status(ErrorCode::kBadRequest, "this daemon serves no embeddings", "input")));
  Job job;
  job.id = request.id;
  job.received_at = request.received_at;
  for (auto& in : request.embed_inputs) {
    if (in.empty() || static_cast<std::int32_t>(in.size()) > most) {
      return out.push_back(error_event(request.id, Status(ErrorCode::kContextExceeded,
                                                          "an input of " + std::to_string(in.size()) + " tokens (1 to " +
                                                              std::to_string(most) + " fit)", "input")));
    }
    for (Token t : in) {
      if (!decoder.valid_token(t)) {
        return out.push_back(error_event(request.id, Status(ErrorCode::kBadRequest, "token " + std::to_string(t) +
                                                                                        " is not in the vocabulary", "input")));
      }
    }
    job.tokens += static_cast<std::int32_t>(in.size());
    job.inputs.push_back(std::move(in));
  }
  jobs_.push_back(std::move(job));
}

void EmbedQueue::run(Decoder& decoder, std::int64_t budget_tokens, std::vector<Event>& out) {
  // Which inputs go into this pass: (job index, input index), oldest first.
  std::vector<std::pair<std::size_t, std::size_t>> picked;
  std::vector<std::vector<Token>> batch;
  std::int64_t tokens = 0;
  for (std::size_t j = 0; j < jobs_.size(); ++j) {
    Job& job = jobs_[j];
    for (std::size_t i = job.vectors.size(); i < job.inputs.size(); ++i) {
      const auto n = static_cast<std::int64_t>(job.inputs[i].size());
      if (!batch.empty() && tokens + n > budget_tokens) goto full;
      picked.emplace_back(j, i);
      batch.push_back(job.inputs[i]);
      tokens += n;
    }
  }
full:
  if (batch.empty()) return;
  std::vector<std::vector<float>> vectors;
  const Status st = decoder.embed(batch, &vectors);
  if (!st.ok()) {
    // The jobs this pass held fail; the others wait for the next.
    std::vector<RequestId> failed;
    for (const auto& [j, i] : picked) {
      if (failed.empty() || failed.back() != jobs_[j].id) failed.push_back(jobs_[j].id);
    }
    for (RequestId id : failed) out.push_back(error_event(id, st));
    std::erase_if(jobs_, [&](const Job& job) { return std::find(failed.begin(), failed.end(), job.id) != failed.end(); });
    return;
  }
  tokens_total_ += static_cast<std::uint64_t>(tokens);
  for (std::size_t k = 0; k < picked.size(); ++k) jobs_[picked[k].first].vectors.push_back(std::move(vectors[k]));
  while (!jobs_.empty() && jobs_.front().vectors.size() == jobs_.front().inputs.size()) {
    Job& done = jobs_.front();
    Event e;
    e.request_id = done.id;
    e.kind = Event::Kind::kDone;
    e.prompt_tokens = done.tokens;
    e.total_ms = ms_between(done.received_at, Clock::now());
    e.embeddings = std::move(done.vectors);
    out.push_back(std::move(e));
    jobs_.pop_front();
  }
}

bool EmbedQueue::cancel(RequestId id, std::vector<Event>& out) {
  const auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.id == id; });
  if (it == jobs_.end()) return false;
  Event e;
  e.request_id = id;
  e.kind = Event::Kind::kDone;
  e.reason = FinishReason::kCancelled;
  out.push_back(std::move(e));
  jobs_.erase(it);
  return true;
}

void EmbedQueue::fail_all(const Status& why, std::vector<Event>& out) {
  for (const Job& j : jobs_) out.push_back(error_event(j.id, why));
  jobs_.clear();
}

}  // namespace uma
