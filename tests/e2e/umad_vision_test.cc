// End to end: images in prompts through a vision projector (uma-mkmodel's random LLaVA projector,
// read by llama.cpp's libmtmd). An image's embeddings fill its place in the prompt, change what the
// model says, come back from the prefix cache, share decodes with other streams, and every API
// takes them. KV-dependent results are compared as logprobs with a tolerance (the model is not
// the oracle: images must reach attention).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "common/base64.h"
#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/test_images.h"

namespace uma::test {
namespace {

using json = nlohmann::json;
constexpr int kImageTokens = 16;  // the test projector: 64x64 pixels in patches of 16

const std::string& red() {
  static const std::string b = bmp(40, 30, [](int, int) { return Rgb{255, 0, 0}; });
  return b;
}
const std::string& gradient() {
  static const std::string b = bmp(40, 30, [](int x, int y) {
    return Rgb{static_cast<unsigned char>(x * 6), static_cast<unsigned char>(y * 8), 128};
  });
  return b;
}
// A PNG cut after its header: its size reads, its pixels never decode.
std::string cut_png() {
  std::string b("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x28\0\0\0\x1e\x08\x02\0\0\0", 29);
  return b + std::string(4, '\0');
}

json call(Tcp& t, const std::string& path, const json& body, int want = 200) {
  EXPECT_TRUE(t.send(post(path, body.dump())));
  const std::string r = t.response();
  EXPECT_EQ(status_of(r), want) << path << " -> " << r.substr(0, 500);
  return json::parse(body_of(r), nullptr, false);
}

json props(Tcp& t) {
  EXPECT_TRUE(t.send("GET /props HTTP/1.1\r\nHost: x\r\n\r\n"));
  return json::parse(body_of(t.response()), nullptr, false);
}

json image_chat(const std::string& image, int max_tokens = 1) {
  return {{"messages", {{{"role", "user"},
                         {"content", {{{"type", "text"}, {"text", "what is in the picture"}},
                                      {{"type", "image_url"}, {"image_url", {{"url", data_url(image)}}}}}}}}},
          {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 5}};
}

// The first generated token's top candidates: token text -> logprob.
std::map<std::string, double> first_top(const json& reply) {
  std::map<std::string, double> out;
  const json& top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
  for (const json& c : top) out[c["token"].get<std::string>()] = c["logprob"].get<double>();
  return out;
}

// The largest logprob difference over the candidates both have (a missing one counts as far apart).
double distance(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  double d = 0;
  for (const auto& [token, lp] : a) {
    auto it = b.find(token);
    d = std::max(d, it == b.end() ? 99.0 : std::fabs(lp - it->second));
  }
  return d;
}

std::vector<std::string> vision_args(std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"--mmproj", model_path("tiny-vision-mmproj.gguf")});
  return http_args(std::move(extra));
}

TEST(UmadVision, AnImageChangesTheAnswerAndComesBackFromThePrefixCache) {
  Daemon d(vision_args(), "tiny-vision-f16.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  EXPECT_EQ(props(t)["modalities"]["vision"], true);
  json text_only = image_chat(red());
  text_only["messages"][0]["content"] = "what is in the picture";
  const int text_tokens = call(t, "/v1/chat/completions", text_only)["usage"]["prompt_tokens"];

  const json a1 = call(t, "/v1/chat/completions", image_chat(red()));
  ASSERT_TRUE(a1.contains("choices")) << a1.dump();
  EXPECT_EQ(a1["usage"]["prompt_tokens"], text_tokens + kImageTokens) << "the image's embeddings take its place";
  // A prefix is kept once it was seen again (a unified KV keeps none seen once): the third is served from it.
  call(t, "/v1/chat/completions", image_chat(red()));
  const json a3 = call(t, "/v1/chat/completions", image_chat(red()));
  EXPECT_GE(a3["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), text_tokens + kImageTokens - 1)
      << "the same image again: its KV from the prefix cache " << a3.dump();
  EXPECT_LT(distance(first_top(a1), first_top(a3)), 1e-2) << "and the same answer";

  const json b1 = call(t, "/v1/chat/completions", image_chat(gradient()));
  EXPECT_GT(distance(first_top(a1), first_top(b1)), 0.05) << "another image, another answer";
  // The text before the image may come from the cache; no position of the other image may (that
  // would reach past the text-only prompt's length: the image is longer than the text after it).
  EXPECT_LT(b1["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), text_tokens);
  call(t, "/v1/chat/completions", image_chat(gradient()));
  const json b3 = call(t, "/v1/chat/completions", image_chat(gradient()));
  EXPECT_GE(b3["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), text_tokens + kImageTokens - 1);
  EXPECT_LT(distance(first_top(b1), first_top(b3)), 1e-2);
  const json m = metrics(d);
  EXPECT_EQ(m["images_encoded_total"], 2) << "each image encoded once: sent again, it came from the image cache";
  EXPECT_EQ(m["image_cache_hits_total"], 4);
}

// An image's rows in the same ticks as another stream's decode rows (two llama_decode calls a tick).
TEST(UmadVision, AnImageBesideADecodingStreamGivesTheAnswerItGivesAlone) {
  Daemon d(vision_args({"--max-tokens", "400", "--no-prefix-cache"}), "tiny-vision-f16.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  Tcp t(port);
  const json alone = call(t, "/v1/chat/completions", image_chat(gradient()));
  std::string stream_end = "<none>";
  std::thread stream([&] {
    Tcp s(port);
    if (!s.send(post("/v1/completions", json({{"prompt", "the river runs"}, {"max_tokens", 400}}).dump()))) return;
    const json j = json::parse(body_of(s.response()), nullptr, false);
    stream_end = j.is_discarded() ? "<bad>" : j["choices"][0]["finish_reason"].get<std::string>();
  });
  const bool decoding = static_cast<bool>(
      eventually([&] { return metrics(d)["tokens_generated_total"].get<int>() > 0; }, "the stream to decode"));
  const json beside = call(t, "/v1/chat/completions", image_chat(gradient()));
  stream.join();
  EXPECT_TRUE(decoding);
  EXPECT_EQ(stream_end, "length");
  EXPECT_LT(distance(first_top(alone), first_top(beside)), 2e-2) << "within llama.cpp's batch variance";
}

TEST(UmadVision, EveryApiTakesImagesAndBadOnesAreRefusedByName) {
  Daemon d(vision_args(), "tiny-vision-f16.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const std::string b64 = base64_encode(gradient());
  const json anthropic_messages = {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "what"}},
      {{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", "image/bmp"}, {"data", b64}}}}}}}};
  const json counted = call(t, "/v1/messages/count_tokens", {{"model", "m"}, {"messages", anthropic_messages}});
  const json anthropic = call(t, "/v1/messages", {{"model", "m"}, {"max_tokens", 2}, {"messages", anthropic_messages}});
  EXPECT_GT(anthropic["usage"]["input_tokens"].get<int>(), kImageTokens) << anthropic.dump();
  EXPECT_EQ(counted["input_tokens"], anthropic["usage"]["input_tokens"]) << "count_tokens counts an image as it is served";
  const json ollama = call(t, "/api/chat", {{"model", "tiny-vision-f16.gguf"}, {"stream", false},
      {"options", {{"num_predict", 2}}}, {"messages", {{{"role", "user"}, {"content", "what"}, {"images", {b64}}}}}});
  EXPECT_GT(ollama["prompt_eval_count"].get<int>(), kImageTokens) << ollama.dump();
  const json responses = call(t, "/v1/responses", {{"max_output_tokens", 2}, {"input", {{{"role", "user"},
      {"content", {{{"type", "input_text"}, {"text", "what"}}, {{"type", "input_image"}, {"image_url", data_url(red())}}}}}}}});
  EXPECT_GT(responses["usage"]["input_tokens"].get<int>(), kImageTokens) << responses.dump();
  // llama-server's prompt object, the prompt ending in its image (its logits row is an image's).
  const json ends = call(t, "/completion", {{"prompt", {{"prompt_string", std::string("look ") + "<__media__>"},
                                                          {"multimodal_data", {b64}}}}, {"n_predict", 3}});
  EXPECT_EQ(ends["tokens_predicted"], 3) << ends.dump();

  // Refused, by name, before or while preparing: nothing else is disturbed.
  EXPECT_EQ(call(t, "/completion", {{"prompt", {{"prompt_string", "no marker"}, {"multimodal_data", {b64}}}}}, 400)
                ["error"]["param"], "image") << "an image with no place in the text";
  std::string bomb = bmp(4, 4, [](int, int) { return Rgb{0, 0, 0}; });
  bomb[18] = bomb[19] = bomb[22] = bomb[23] = '\x7f';  // a header of 32639 x 32639 pixels
  EXPECT_EQ(call(t, "/v1/chat/completions", image_chat(bomb), 413)["error"]["param"], "messages[].content[].image_url");
  EXPECT_EQ(call(t, "/v1/chat/completions", image_chat(cut_png()), 400)["error"]["param"], "image")
      << "a cut file: its header reads, its pixels do not decode";
  json remote = image_chat(red());
  remote["messages"][0]["content"][1]["image_url"]["url"] = "https://example.com/cat.png";
  EXPECT_EQ(call(t, "/v1/chat/completions", remote, 501)["error"]["type"], "not_supported_error");
  const json after = call(t, "/v1/chat/completions", image_chat(red()));
  EXPECT_EQ(after["choices"][0]["finish_reason"], "length") << "still serving";
}

TEST(UmadVision, TheOfficialClientsSendImagesAsTheirUsersDo) {
  if (!node_sdks_available()) GTEST_SKIP() << "no node or the SDKs here (scripts/npm_deps.sh)";
  Daemon d(vision_args({"--alias", "vision"}), "tiny-vision-f16.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  std::string out;
  EXPECT_EQ(run_vision_clients_test("http://127.0.0.1:" + std::to_string(http_port(d)), "vision", kImageTokens, &out), 0) << out;
  EXPECT_NE(out.find("vision clients: all passed"), std::string::npos) << out;
}

TEST(UmadVision, ADaemonWithoutAProjectorRefusesImagesWith501) {
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const json r = call(t, "/v1/chat/completions", image_chat(red()), 501);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("vision projector"), std::string::npos) << r.dump();
  EXPECT_EQ(props(t)["modalities"]["vision"], false);
}

}  // namespace
}  // namespace uma::test
