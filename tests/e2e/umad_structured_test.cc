// Structured output, end to end on a random model (the oracle cannot show it: its next token is
// fixed): 3 schemas x 20 seeds, sampled at temperature 1 over the framed JSON protocol, 16 at a
// time. Every schema's strings are bounded (enums, maxLength), so every output must end with
// `stop` well within max_tokens, parse as JSON and satisfy its schema (checked by the small
// validator below, for the keywords these schemas use).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <mutex>
#include <thread>

#include "e2e/daemon_harness.h"
#include "e2e/json_helpers.h"

namespace uma::test::structured {  // its own: `json` is ordered here
namespace {

using json = nlohmann::ordered_json;  // key order matters: the output's follows the schema's

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

// The keywords of the schemas below: type, properties, required, additionalProperties: false,
// enum, minimum/maximum, minLength/maxLength, items, minItems/maxItems.
bool valid(const json& v, const json& schema, std::string* why) {
  const auto fail = [&](const std::string& w) {
    *why = w + " at " + v.dump();
    return false;
  };
  if (schema.contains("enum")) {
    for (const json& e : schema["enum"]) {
      if (e == v) return true;
    }
    return fail("not in enum");
  }
  const std::string type = schema.value("type", "");
  if (type == "object") {
    if (!v.is_object()) return fail("not an object");
    const json props = schema.value("properties", json::object());
    for (const json& r : schema.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return fail("missing " + r.get<std::string>());
    }
    // Properties come out in the schema's order (a grammar fixes it; OpenAI's structured outputs
    // do the same), so a schema's order must survive every parse on the way.
    std::vector<std::string> order, expected;
    for (const auto& [k, x] : v.items()) order.push_back(k);
    for (const auto& [k, x] : props.items()) {
      if (v.contains(k)) expected.push_back(k);
    }
    if (order.size() == expected.size() && order != expected) return fail("properties out of the schema's order");
    for (const auto& [k, x] : v.items()) {
      if (!props.contains(k)) {
        if (schema.value("additionalProperties", true) == false) return fail("extra property " + k);
        continue;
      }
      if (!valid(x, props[k], why)) return false;
    }
    return true;
  }
  if (type == "array") {
    if (!v.is_array()) return fail("not an array");
    if (v.size() < schema.value("minItems", 0u) || v.size() > schema.value("maxItems", 1u << 30)) return fail("item count");
    for (const json& x : v) {
      if (!valid(x, schema["items"], why)) return false;
    }
    return true;
  }
  if (type == "string") {
    if (!v.is_string()) return fail("not a string");
    const std::size_t n = code_points(v.get<std::string>());
    if (n < schema.value("minLength", 0u) || n > schema.value("maxLength", 1u << 30)) return fail("string length");
    return true;
  }
  if (type == "integer") {
    if (!v.is_number_integer()) return fail("not an integer");
    const auto x = v.get<std::int64_t>();
    if (x < schema.value("minimum", INT64_MIN) || x > schema.value("maximum", INT64_MAX)) return fail("out of range");
    return true;
  }
  if (type == "boolean") return v.is_boolean() || fail("not a boolean");
  return fail("schema type '" + type + "' not known to this validator");
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"tag":{"type":"string","maxLength":8},"n":{"type":"integer","minimum":0,"maximum":99},
        "color":{"enum":["red","green","blue"]},"ok":{"type":"boolean"}},
        "required":["color","n","ok","tag"],"additionalProperties":false})",
    R"({"type":"object","properties":{"items":{"type":"array","items":{"enum":["a","b","c"]},"minItems":1,"maxItems":4}},
        "required":["items"],"additionalProperties":false})",
    R"({"type":"object","properties":{"user":{"type":"object","properties":{
          "name":{"type":"string","minLength":1,"maxLength":6},"age":{"type":"integer","minimum":1,"maximum":120}},
          "required":["name","age"],"additionalProperties":false},"admin":{"type":"boolean"}},
        "required":["user","admin"],"additionalProperties":false})",
};

TEST(UmadStructured, EveryOutputOfThreeSchemasTimesTwentySeedsEndsWithStopParsesAndValidates) {
  Daemon d(args({"--max-sessions", "16", "--n-ctx", "16384"}), "tiny-f16.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  // The grammar's work is llama.cpp's (uninstrumented): under the sanitizers two seeds of each
  // schema run the same paths, six streams at once.
  constexpr int kSeeds = kSanitized ? 2 : 20;
  constexpr int kMaxTokens = 400;
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  int ok = 0;
  std::vector<std::thread> workers;
  for (int w = 0; w < 16; ++w) {
    workers.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < 3 * kSeeds;) {
        const json schema = json::parse(kSchemas[i % 3]);
        WireRequest r;
        r.id = "s" + std::to_string(i);
        r.prompt = "Answer in JSON:";
        r.max_tokens = kMaxTokens;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = static_cast<std::uint32_t>(1000 + i / 3);
        r.json_schema = schema.dump();
        auto c = connect(d);
        std::string why;
        if (c == nullptr || !c->send_request(r).ok()) {
          why = "cannot send";
        } else {
          const Reply reply = read_reply(*c, false);
          if (reply.end.kind == WireEvent::Kind::kUnknown) {
            why = "timed out waiting for the eos (or the connection closed) after " + std::to_string(reply.tokens) + " tokens";
          } else if (reply.end.kind != WireEvent::Kind::kEos) {
            why = "no eos: " + reply.end.code + " " + reply.end.message;
          } else if (reply.end.reason != "stop") {
            why = "ended with '" + reply.end.reason + "' after " + std::to_string(reply.end.completion_tokens) + " tokens";
          } else {
            const json out = json::parse(reply.text, nullptr, false);
            if (out.is_discarded()) why = "not JSON";
            else if (valid(out, schema, &why)) why.clear();
          }
          if (!why.empty()) why += ": '" + reply.text + "'";
        }
        std::lock_guard<std::mutex> lock(mu);
        if (why.empty()) ++ok;
        else failures.push_back("schema " + std::to_string(i % 3) + " seed " + std::to_string(1000 + i / 3) + ": " + why);
      }
    });
  }
  for (auto& t : workers) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(ok, 3 * kSeeds);
}

TEST(UmadStructured, ASchemaThatCannotBeAGrammarIsABadRequestNamingIt) {
  Daemon d(args({}), "tiny-f16.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  WireRequest r;
  r.id = "bad";
  r.prompt = "x";
  r.json_schema = R"({"type":"object","properties":{"a":{"$ref":"#/nowhere"}}})";
  ASSERT_TRUE(c->send_request(r).ok());
  const Reply reply = read_reply(*c);
  EXPECT_EQ(reply.end.kind, WireEvent::Kind::kError);
  EXPECT_EQ(reply.end.code, "E_PROTO_BAD_REQUEST");
  EXPECT_EQ(reply.end.param, "json_schema");
}

}  // namespace
}  // namespace uma::test::structured
