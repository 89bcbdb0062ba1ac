// PrepareStage: the work between a front end and the compute thread that needs the model's
// vocabulary but not its context. A request's text prompt becomes token ids here, so the compute
// thread (which ticks every stream) never stops to tokenize a long prompt, and the I/O thread
// (which writes every stream's tokens) does not either: prompts of at least `pool_bytes` go to
// `threads` threads of the stage's own; shorter ones, microseconds of work, are tokenized on the
// submitting thread rather than paying two thread hops (llama-server tokenizes on its HTTP
// threads, vLLM in its front-end process). A prompt that already has token ids (a client's, or a
// gateway's: `uma.prompt_tokens`) passes through. The same threads run the front ends' own
// preparation (run(): an HTTP body parsed and its chat rendered), so one pool does all of it.
//
// Order: a request's cancel never overtakes it (a cancel for a request still being prepared goes
// right after it); requests may overtake each other (a short prompt is not held behind a long one).
// A prompt that does not tokenize goes on as text: the scheduler tokenizes it and reports the
// error as it reports every other. A prompt with images always goes to the stage's threads (an
// image's encoder pass is milliseconds to seconds); its errors go on in the request's
// prepare_status, which the scheduler answers.
//
// Threading: submit() from any thread; `next` is called from the stage's threads and from
// submit()'s callers, concurrently. Lifetime: the destructor drops what is still queued (their
// front ends are shutting down) and joins; `next` and `tokenize` must outlive the stage.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/status.h"
#include "serve/io_boundary.h"
#include "serve/token.h"

namespace uma {

class PrepareStage {
 public:
  using Tokenize = std::function<Status(std::string_view text, std::vector<Token>& out, bool parse_special)>;
  // A prompt's text and images into token ids and placed embeddings (runtime/image_encoder.h).
  // Empty: images are refused (kNotSupported).
  using PrepareImages = std::function<Status(const Request& r, std::vector<Token>* tokens, std::vector<PromptImage>* placed)>;
  struct Options {
    int threads = 1;
    std::size_t pool_bytes = 1024;  // shorter prompts are tokenized on the submitting thread
  };
  PrepareStage(Options options, Tokenize tokenize, WorkSubmit next, PrepareImages images = {});
  ~PrepareStage();
  PrepareStage(const PrepareStage&) = delete;
  PrepareStage& operator=(const PrepareStage&) = delete;

  void submit(WorkItem item);
  // Runs `job` on the stage's threads, in turn with the prompts; false (not run) without threads.
  bool run(std::function<void()> job);

 private:
  void serve();  // a stage thread
  void prepare(Request& r) const;  // text -> token ids, where it tokenizes
  void prepare_images(Request& r) const;

  Options options_;
  Tokenize tokenize_;
  WorkSubmit next_;
  PrepareImages images_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::variant<Request, std::function<void()>>> queue_;  // guarded by mu_
  std::unordered_map<RequestId, bool> pending_;  // id -> cancelled meanwhile; guarded by mu_
  bool stop_ = false;                            // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace uma
