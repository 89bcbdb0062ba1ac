// End to end over HTTP: what llama-server's and Ollama's users reach for beyond completions: the
// web page at / (in headless Chromium), /infill's fill-in-the-middle prompt, /rerank on a
// reranking model, against the oracle's known outputs and llama-server's answers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {
using json = nlohmann::json;
}  // namespace
}  // namespace uma::test

namespace uma::test {
namespace {

std::string get_with(int port, const std::string& path, const std::string& key = "") {
  Tcp t(port);
  EXPECT_TRUE(t.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n" + (key.empty() ? "" : "Authorization: Bearer " + key + "\r\n") +
                     "\r\n"));
  return t.response();
}

// The page is a static file of the binary's; the key still guards every request it makes.
TEST(UmadApi, TheWebPageIsServedAtTheRootWithoutTheKeyAndTurnsOff) {
  const std::string key_file = temp_dir() + "/webui-key";
  std::ofstream(key_file) << "sesame\n";
  Daemon d(http_args({"--api-key-file", key_file}));
  ASSERT_TRUE(d.started()) << d.log();
  for (const char* path : {"/", "/index.html"}) {
    const std::string r = get_with(http_port(d), path);
    EXPECT_EQ(status_of(r), 200) << r;
    EXPECT_NE(head_of(r).find("text/html"), std::string::npos) << head_of(r);
    EXPECT_NE(body_of(r).find("<title>UMA Serve</title>"), std::string::npos);
  }
  EXPECT_EQ(status_of(get_with(http_port(d), "/v1/models")), 401) << "what the page asks for needs the key";
  EXPECT_EQ(status_of(get_with(http_port(d), "/v1/models", "sesame")), 200);
  EXPECT_EQ(status_of(get_with(http_port(d), "/index.htm")), 401) << "only the page's own paths are open";

  Daemon off(http_args({"--no-webui"}));
  ASSERT_TRUE(off.started()) << off.log();
  EXPECT_EQ(status_of(get_with(http_port(off), "/")), 404);
}

// In Chromium: the key asked for, a streamed chat reply exact against the oracle, Stop, and the
// status view showing the requests.
TEST(UmadApi, TheWebPageChatsStopsAndShowsTheRequestInChromium) {
  if (!webui_test_available()) GTEST_SKIP() << "no node, puppeteer-core (scripts/npm_deps.sh) or chromium here";
  const std::string key_file = temp_dir() + "/webui-key";
  std::ofstream(key_file) << "sesame\n";
  Daemon d(http_args({"--api-key-file", key_file, "--alias", "oracle"}));
  ASSERT_TRUE(d.started()) << d.log();
  std::string out;
  EXPECT_EQ(run_webui_test("http://127.0.0.1:" + std::to_string(http_port(d)), "sesame", temp_dir(), &out), 0) << out;
  EXPECT_NE(out.find("webui: all passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace uma::test

namespace uma::test {
namespace {

std::vector<int> tokens_of(Tcp& t, const std::string& text) {
  EXPECT_TRUE(t.send(post("/tokenize", json{{"content", text}}.dump())));
  return json::parse(body_of(t.response()))["tokens"].get<std::vector<int>>();
}

// llama-server's /infill: the FIM prompt built from the model's own FIM tokens (the oracle made
// with PRE, SUF, MID = 4, 5, 6; REP, SEP = 250, 251). The oracle answers MID + 1, + 2, ...: the
// prompt ended in MID; its length is every piece's in llama-server's order.
TEST(UmadApi, InfillBuildsLlamaServersFillInTheMiddlePrompt) {
  Daemon d(http_args({}), "oracle-fim.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const json req = {{"input_prefix", "def area(r):\n    return"}, {"input_suffix", "\nprint(area(2))"},
                    {"input_extra", {{{"filename", "util.py"}, {"text", "PI = 3.14159"}}}}, {"n_predict", 4}};
  ASSERT_TRUE(t.send(post("/infill", req.dump())));
  const std::string r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  const json j = json::parse(body_of(r));
  EXPECT_EQ(j["content"], std::string("\x04\x05\x06\x07")) << "the tokens after MID (6): 7, 8, 9, 10";
  EXPECT_EQ(j["tokens_predicted"], 4);
  const std::size_t expected = 1 + tokens_of(t, "myproject\n").size()              // [REP] myproject
                               + 1 + tokens_of(t, "util.py\n").size() + tokens_of(t, "PI = 3.14159").size()  // [SEP] file
                               + 1 + tokens_of(t, "filename\n").size()              // [SEP] filename
                               + 1 + 1 + tokens_of(t, "def area(r):\n    return").size()  // BOS [PRE] prefix
                               + 1 + tokens_of(t, "\nprint(area(2))").size() + 1;   // [SUF] suffix [MID]
  EXPECT_EQ(j["tokens_evaluated"].get<std::size_t>(), expected) << j.dump();
  // Streamed as /completion streams; a prompt after the prefix.
  json streamed = req;
  streamed["stream"] = true;
  streamed["prompt"] = "    ";
  ASSERT_TRUE(t.send(post("/infill", streamed.dump())));
  const std::string s = t.response();
  EXPECT_EQ(status_of(s), 200) << s;
  EXPECT_NE(s.find("\"stop\":true"), std::string::npos) << s;
  // What is not an infill: typed errors.
  for (const json& bad : {json{{"input_prefix", "x"}}, json{{"input_suffix", "x"}},
                          json{{"input_prefix", "x"}, {"input_suffix", "y"}, {"input_extra", "z"}},
                          json{{"input_prefix", "x"}, {"input_suffix", "y"}, {"input_extra", {{{"filename", "a"}}}}},
                          json{{"input_prefix", {1, -5}}, {"input_suffix", "y"}}, json{{"input_prefix", "x"}, {"input_suffix", "y"}, {"prompt", 3}}}) {
    ASSERT_TRUE(t.send(post("/infill", bad.dump())));
    EXPECT_EQ(status_of(t.response()), 400) << bad.dump();
  }
  // Ollama's generate with a suffix (editors' code completion): the same FIM prompt, no extra files.
  ASSERT_TRUE(t.send(post("/api/generate", json{{"model", "m"}, {"prompt", "def area(r):\n    return"}, {"suffix", "\nprint(area(2))"},
                                                 {"stream", false}, {"options", {{"num_predict", 4}}}}.dump())));
  const std::string o = t.response();
  ASSERT_EQ(status_of(o), 200) << o;
  const json oj = json::parse(body_of(o));
  EXPECT_EQ(oj["response"], std::string("\x04\x05\x06\x07")) << oj.dump();
  EXPECT_EQ(oj["prompt_eval_count"].get<std::size_t>(),
            expected - (1 + tokens_of(t, "util.py\n").size() + tokens_of(t, "PI = 3.14159").size()));
  // A model without FIM tokens: 501, as llama-server answers.
  Daemon plain(http_args({}));
  ASSERT_TRUE(plain.started()) << plain.log();
  Tcp p(http_port(plain));
  ASSERT_TRUE(p.send(post("/infill", R"({"input_prefix":"a","input_suffix":"b"})")));
  const std::string no = p.response();
  EXPECT_EQ(status_of(no), 501) << no;
  EXPECT_NE(no.find("middle token is missing"), std::string::npos) << no;
  ASSERT_TRUE(p.send(post("/api/generate", R"({"model":"m","prompt":"a","suffix":"b","stream":false})")));
  EXPECT_EQ(status_of(p.response()), 501) << "Ollama's suffix on a model without FIM tokens";
}

}  // namespace
}  // namespace uma::test

namespace uma::test {
namespace {

json rerank_call(Tcp& t, const std::string& path, const json& body, int* status = nullptr) {
  EXPECT_TRUE(t.send(post(path, body.dump())));
  const std::string r = t.response();
  if (status != nullptr) *status = status_of(r);
  return json::parse(body_of(r), nullptr, false);
}

// llama-server's /rerank on a reranking model (rank pooling): every document scored with the query
// by the classifier, best first; a document's score is its own whatever else is in the request
// (a tolerance: the pass holds the documents together); the pair's prompt is [BOS] query document.
TEST(UmadApi, RerankScoresEveryDocumentBestFirstAsLlamaServerAnswers) {
  Daemon d(http_args({}), "tiny-rerank-f32.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  const std::string query = "what is a river";
  const std::vector<std::string> docs = {"a river is water flowing to the sea", "cats sleep all day", "the Nile is a river",
                                         "bread rises in the oven"};
  int status = 0;
  const json all = rerank_call(t, "/v1/rerank", {{"model", "r"}, {"query", query}, {"documents", docs}}, &status);
  ASSERT_EQ(status, 200) << all.dump();
  EXPECT_EQ(all["object"], "list");
  EXPECT_EQ(all["model"], "r");
  ASSERT_EQ(all["results"].size(), docs.size());
  std::vector<double> score(docs.size(), -1);
  double last = 2;
  for (const json& r : all["results"]) {
    const double s = r["relevance_score"].get<double>();
    EXPECT_GT(s, 0.0);
    EXPECT_LT(s, 1.0) << "a softmax over the classifier's two outputs";
    EXPECT_LE(s, last) << "best first";
    last = s;
    score.at(r["index"].get<std::size_t>()) = s;
  }
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    EXPECT_GE(score[i], 0) << "every index once";
    const json one = rerank_call(t, "/rerank", {{"query", query}, {"documents", {docs[i]}}});
    EXPECT_NEAR(one["results"][0]["relevance_score"].get<double>(), score[i], 1e-4) << docs[i];
    tokens += 1 + tokens_of(t, query).size() + tokens_of(t, docs[i]).size();  // BOS query document
  }
  EXPECT_EQ(all["usage"]["prompt_tokens"].get<std::size_t>(), tokens);
  // top_n: the best n; documents as {"text"} objects (Cohere's) score the same.
  json objects = json::array();
  for (const std::string& s : docs) objects.push_back({{"text", s}});
  const json top = rerank_call(t, "/reranking", {{"query", query}, {"documents", objects}, {"top_n", 2}, {"return_documents", true}});
  ASSERT_EQ(top["results"].size(), 2u) << top.dump();
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(top["results"][k]["index"], all["results"][k]["index"]);
    EXPECT_EQ(top["results"][k]["document"]["text"], docs.at(top["results"][k]["index"].get<std::size_t>()));
  }
  // TEI's shape: `texts` in, an array out.
  const json tei = rerank_call(t, "/rerank", {{"query", query}, {"texts", docs}, {"return_text", true}});
  ASSERT_TRUE(tei.is_array()) << tei.dump();
  EXPECT_EQ(tei[0]["index"], all["results"][0]["index"]);
  EXPECT_NEAR(tei[0]["score"].get<double>(), all["results"][0]["relevance_score"].get<double>(), 1e-4);
  EXPECT_EQ(tei[0]["text"], docs.at(tei[0]["index"].get<std::size_t>()));
  for (const json& bad : {json{{"documents", docs}}, json{{"query", 1}, {"documents", docs}}, json{{"query", query}},
                          json{{"query", query}, {"documents", json::array()}}, json{{"query", query}, {"documents", {1, 2}}},
                          json{{"query", query}, {"documents", docs}, {"top_n", 0}}}) {
    rerank_call(t, "/v1/rerank", bad, &status);
    EXPECT_EQ(status, 400) << bad.dump();
  }
  // A model that does not rank: 501, as llama-server without --reranking.
  Daemon plain(http_args({}));
  ASSERT_TRUE(plain.started()) << plain.log();
  Tcp p(http_port(plain));
  rerank_call(p, "/v1/rerank", {{"query", query}, {"documents", docs}}, &status);
  EXPECT_EQ(status, 501);
}

}  // namespace
}  // namespace uma::test
