// PrepareStage with a fake tokenizer (a token per byte) that a test can hold: prompts become
// tokens on the right thread, a cancel never overtakes its request, short requests overtake a long
// one being tokenized, and what is not text passes through untouched.
#include "serve/prepare_stage.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace uma {
namespace {

struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<WorkItem> items;
  void take(WorkItem item) {
    std::lock_guard<std::mutex> lock(mu);
    items.push_back(std::move(item));
    cv.notify_all();
  }
  void wait_for(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return items.size() >= n; });
  }
};

Request text(RequestId id, std::string prompt) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  return r;
}

Status bytes_as_tokens(std::string_view s, std::vector<Token>& out) {
  if (s.find('!') != std::string_view::npos) return Status(ErrorCode::kBadRequest, "no '!' here");
  for (unsigned char c : s) out.push_back(c);
  return Status::Ok();
}

TEST(PrepareStage, TextBecomesTokensShortOnTheCallerLongOnTheStagesThread) {
  Sink sink;
  std::mutex mu;
  std::vector<std::thread::id> where;
  PrepareStage stage(
      PrepareStage::Options{1, 8},
      [&](std::string_view s, std::vector<Token>& out, bool) {
        std::lock_guard<std::mutex> lock(mu);
        where.push_back(std::this_thread::get_id());
        return bytes_as_tokens(s, out);
      },
      [&](WorkItem item) { sink.take(std::move(item)); });
  stage.submit(text(1, "abc"));
  stage.submit(text(2, "a longer prompt"));
  sink.wait_for(2);
  std::lock_guard<std::mutex> lock(sink.mu);
  for (const WorkItem& item : sink.items) {
    const Request& r = std::get<Request>(item);
    EXPECT_TRUE(r.prompt.empty()) << r.id;
    EXPECT_EQ(r.prompt_tokens.size(), r.id == 1 ? 3u : 15u);
  }
  EXPECT_EQ(std::get<Request>(sink.items[0]).prompt_tokens, (std::vector<Token>{'a', 'b', 'c'}));
  ASSERT_EQ(where.size(), 2u);
  EXPECT_EQ(where[0], std::this_thread::get_id());
  EXPECT_NE(where[1], std::this_thread::get_id());
}

TEST(PrepareStage, ACancelNeverOvertakesItsRequestAndShortRequestsOvertakeALongOne) {
  Sink sink;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  PrepareStage stage(
      PrepareStage::Options{1, 8},
      [&](std::string_view s, std::vector<Token>& out, bool) {
        if (s.size() >= 8) {
          started.set_value();
          released.wait();  // held until the test has sent the rest
        }
        return bytes_as_tokens(s, out);
      },
      [&](WorkItem item) { sink.take(std::move(item)); });
  stage.submit(text(1, "a long prompt held"));
  started.get_future().wait();
  stage.submit(CancelRequest{1});
  stage.submit(text(2, "short"));
  stage.submit(CancelRequest{7});  // not being prepared: straight through
  sink.wait_for(2);
  release.set_value();
  sink.wait_for(4);
  std::lock_guard<std::mutex> lock(sink.mu);
  ASSERT_EQ(sink.items.size(), 4u);
  EXPECT_EQ(std::get<Request>(sink.items[0]).id, 2u);
  EXPECT_EQ(std::get<CancelRequest>(sink.items[1]).id, 7u);
  EXPECT_EQ(std::get<Request>(sink.items[2]).id, 1u);
  EXPECT_EQ(std::get<Request>(sink.items[2]).prompt_tokens.size(), 18u);
  EXPECT_EQ(std::get<CancelRequest>(sink.items[3]).id, 1u);
}

TEST(PrepareStage, TokensEmbeddingsAndUntokenizableTextPassThrough) {
  Sink sink;
  PrepareStage stage(
      PrepareStage::Options{1, 1}, [](std::string_view s, std::vector<Token>& out, bool) { return bytes_as_tokens(s, out); },
      [&](WorkItem item) { sink.take(std::move(item)); });
  Request given = text(1, "ignored");
  given.prompt_tokens = {5, 6};
  Request embed;
  embed.id = 2;
  embed.embed_inputs = {{1, 2, 3}};
  stage.submit(given);
  stage.submit(embed);
  stage.submit(text(3, "bad!"));
  sink.wait_for(3);
  std::lock_guard<std::mutex> lock(sink.mu);
  for (const WorkItem& item : sink.items) {
    const Request& r = std::get<Request>(item);
    if (r.id == 1) {
      EXPECT_EQ(r.prompt_tokens, (std::vector<Token>{5, 6}));
    }
    if (r.id == 2) {
      EXPECT_TRUE(r.prompt_tokens.empty());
    }
    if (r.id == 3) {
      EXPECT_EQ(r.prompt, "bad!") << "left for the scheduler, which reports the error";
      EXPECT_TRUE(r.prompt_tokens.empty());
    }
  }
}

}  // namespace
}  // namespace uma
