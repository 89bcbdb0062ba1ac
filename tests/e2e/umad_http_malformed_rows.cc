// The rows of the malformed-HTTP table (see umad_http_malformed.h).
#include "e2e/umad_http_malformed.h"

#include <algorithm>
#include <cstdio>

#include "e2e/http_client.h"
#include "e2e/oracle.h"
#include "llama.h"

namespace uma::test::malformed {
namespace {

using namespace std::string_literals;

// The chat prompt chatml renders for one user message, and the oracle's continuation of it.
std::string chat_expected(const std::string& content, int n) {
  const llama_chat_message m{"user", content.c_str()};
  std::string out(4096, '\0');
  const int len = llama_chat_apply_template("chatml", &m, 1, true, out.data(), static_cast<int>(out.size()));
  out.resize(static_cast<std::size_t>(std::max(0, len)));
  return oracle().expected_text(out, n);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string raw_post(const std::string& path, const std::string& extra_headers, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + extra_headers + "\r\n" + body;
}

std::string chunked(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", p.size());
    out += size + p + "\r\n";
  }
  return out + "0\r\n\r\n";
}

}  // namespace

std::vector<Row> table() {
  const std::string hw = R"({"prompt":"hello world","max_tokens":8,"temperature":0})";
  const std::string hw8 = oracle().expected_text("hello world", 8);
  const std::string chat8 = chat_expected("hello world", 8);
  const std::string kCompl = "/v1/completions";
  const std::string kChat = "/v1/chat/completions";
  const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  std::vector<Row> rows;
  // A body that must be rejected with a JSON 400 (or `code`); the connection stays usable.
  auto bad = [&](std::string name, const std::string& path, const std::string& body, int code = 400) {
    rows.push_back({std::move(name), {post(path, body)}, {status({code})}, End::kOpen});
  };
  // A well-formed request that must be served exactly.
  auto good = [&](std::string name, std::vector<std::string> pieces, std::string text) {
    rows.push_back({std::move(name), std::move(pieces), {ok(std::move(text))}, End::kOpen});
  };
  // A broken HTTP message: an error status, then the server closes.
  auto broken = [&](std::string name, std::string bytes, std::set<int> codes = {400}) {
    rows.push_back({std::move(name), {std::move(bytes)}, {status(std::move(codes))}, End::kClosed});
  };
  // Bytes that are no request at all: a clean close, possibly after a 400.
  auto closes = [&](std::string name, std::vector<std::string> pieces, After after = After::kNothing) {
    rows.push_back({std::move(name), std::move(pieces), {maybe({400, 408})}, End::kClosed, after});
  };

  // ---- /v1/completions: prompt
  bad("prompt as number", kCompl, R"({"prompt":42})");
  bad("prompt as null", kCompl, R"({"prompt":null})");
  bad("prompt as bool", kCompl, R"({"prompt":true})");
  bad("prompt as object", kCompl, R"({"prompt":{"text":"hello"}})");
  rows.push_back({"prompt as array of two strings: a choice each",
                  {post(kCompl, R"({"prompt":["hello","world"],"max_tokens":2})")}, {Expected{{200}, {}, false, R"("index":1)"}}});
  good("prompt as array of token ids (no BOS added)", {post(kCompl, R"({"prompt":[22172,3186],"max_tokens":8})")}, hw8);
  bad("prompt token id out of the vocabulary", kCompl, R"({"prompt":[22172,99999999]})");
  bad("prompt token id negative", kCompl, R"({"prompt":[-5]})");
  // Ids and text in one prompt are llama-server's mixed prompt; an object among them is not.
  bad("prompt token ids mixed with an object", kCompl, R"({"prompt":[22172,{}]})");
  bad("prompt token ids mixed with an empty string", kCompl, R"({"prompt":[22172,""]})");
  bad("prompt object without prompt_string", kCompl, R"({"prompt":{"text":"x"}})");
  // Ollama's API: its own checks, its {"error": ...} body.
  bad("ollama chat messages not an array", "/api/chat", R"({"model":"m","messages":5})");
  bad("ollama chat option num_predict zero", "/api/chat", R"({"model":"m","messages":[],"options":{"num_predict":0}})");
  bad("ollama chat with an image", "/api/chat", R"({"model":"m","messages":[{"role":"user","content":"x","images":["aGk="]}]})", 501);
  bad("ollama generate prompt not a string", "/api/generate", R"({"model":"m","prompt":[1]})");
  bad("ollama embed without input", "/api/embed", R"({"model":"m"})");
  bad("prompt array of an empty token array", kCompl, R"({"prompt":[[]]})");
  bad("prompts x n over 16 choices", kCompl, R"({"prompt":["a","b","c"],"n":6})");
  bad("prompt as empty array", kCompl, R"({"prompt":[]})");
  bad("prompt missing", kCompl, R"({"max_tokens":8})");
  bad("prompt empty", kCompl, R"({"prompt":""})");
  good("prompt as array of one string", {post(kCompl, R"({"prompt":["hello world"],"max_tokens":8})")}, hw8);
  // ---- /v1/chat/completions: messages, role, content, content parts
  bad("messages missing", kChat, R"({"max_tokens":8})");
  bad("messages as string", kChat, R"({"messages":"hello"})");
  bad("messages as object", kChat, R"({"messages":{"role":"user","content":"hello"}})");
  bad("messages empty", kChat, R"({"messages":[]})");
  bad("messages[] as number", kChat, R"({"messages":[1]})");
  bad("messages[].role as number", kChat, R"({"messages":[{"role":1,"content":"hello"}]})");
  bad("messages[].role null", kChat, R"({"messages":[{"role":null,"content":"hello"}]})");
  bad("messages[].role missing", kChat, R"({"messages":[{"content":"hello"}]})");
  bad("messages[].content as number", kChat, R"({"messages":[{"role":"user","content":5}]})");
  bad("messages[].content as object", kChat, R"({"messages":[{"role":"user","content":{"text":"hello"}}]})");
  bad("content part as string", kChat, R"({"messages":[{"role":"user","content":["hello"]}]})");
  bad("content part type as number", kChat, R"({"messages":[{"role":"user","content":[{"type":1,"text":"x"}]}]})");
  bad("content part type null", kChat, R"({"messages":[{"role":"user","content":[{"type":null,"text":"x"}]}]})");
  bad("content part without text", kChat, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})");
  bad("content part text as number", kChat, R"({"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})");
  bad("content part image_url", kChat,
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]})", 501);
  good("chat with two text parts",
       {post(kChat, R"({"messages":[{"role":"user","content":[{"type":"text","text":"hello "},)"
                    R"({"type":"text","text":"world"}]}],"max_tokens":8})")},
       chat8);
  // ---- max_tokens
  bad("max_tokens as string", kCompl, R"({"prompt":"hello world","max_tokens":"8"})");
  bad("max_tokens as float", kCompl, R"({"prompt":"hello world","max_tokens":8.5})");
  bad("max_tokens negative", kCompl, R"({"prompt":"hello world","max_tokens":-1})");
  bad("max_tokens 0", kCompl, R"({"prompt":"hello world","max_tokens":0})");
  bad("max_tokens huge", kCompl, R"({"prompt":"hello world","max_tokens":1000000000000})");
  bad("max_tokens 2^64-1", kCompl, R"({"prompt":"hello world","max_tokens":18446744073709551615})");
  bad("max_tokens 1e400 (overflows a double)", kCompl, R"({"prompt":"hello world","max_tokens":1e400})");
  good("max_tokens over --max-tokens is lowered to it",
       {post(kCompl, R"({"prompt":"hello world","max_tokens":4096,"temperature":0})")},
       oracle().expected_text("hello world", kMaxTokens));
  bad("max_completion_tokens as string", kCompl, R"({"prompt":"hello world","max_completion_tokens":"8"})");
  // ---- sampling
  bad("temperature as string", kCompl, R"({"prompt":"hello world","temperature":"0"})");
  bad("temperature negative", kCompl, R"({"prompt":"hello world","temperature":-0.5})");
  bad("temperature over 2", kCompl, R"({"prompt":"hello world","temperature":2.5})");
  bad("top_p as string", kCompl, R"({"prompt":"hello world","top_p":"0.5"})");
  bad("top_p over 1", kCompl, R"({"prompt":"hello world","top_p":1.5})");
  bad("top_p negative", kCompl, R"({"prompt":"hello world","top_p":-0.1})");
  bad("presence_penalty over 2", kCompl, R"({"prompt":"hello world","presence_penalty":3})");
  bad("frequency_penalty as string", kCompl, R"({"prompt":"hello world","frequency_penalty":"x"})");
  bad("seed as string", kCompl, R"({"prompt":"hello world","seed":"42"})");
  bad("seed as float", kCompl, R"({"prompt":"hello world","seed":1.5})");
  bad("n = 17", kCompl, R"({"prompt":"hello world","n":17})");
  bad("n = 0", kCompl, R"({"prompt":"hello world","n":0})");
  bad("n as string", kCompl, R"({"prompt":"hello world","n":"1"})");
  // ---- stop
  bad("stop as number", kCompl, R"({"prompt":"hello world","stop":5})");
  bad("stop as object", kCompl, R"({"prompt":"hello world","stop":{"a":"b"}})");
  good("stop array of 5 (up to 16)", {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"stop":["@1","@2","@3","@4","@5"]})")}, hw8);
  bad("stop array of 17", kCompl, R"({"prompt":"hello world","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})");
  bad("stop array with a number", kCompl, R"({"prompt":"hello world","stop":["a",1]})");
  bad("stop empty string", kCompl, R"({"prompt":"hello world","stop":""})");
  bad("stop array with an empty string", kCompl, R"({"prompt":"hello world","stop":["a",""]})");
  good("stop empty array (no stop strings)", {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"stop":[]})")}, hw8);
  // ---- stream, stream_options, user, model
  bad("stream as string", kCompl, R"({"prompt":"hello world","stream":"true"})");
  bad("stream as number", kCompl, R"({"prompt":"hello world","stream":1})");
  bad("stream_options as number", kCompl, R"({"prompt":"hello world","max_tokens":8,"stream":true,"stream_options":1})");
  bad("stream_options.include_usage = 1", kCompl,
      R"({"prompt":"hello world","max_tokens":8,"stream":true,"stream_options":{"include_usage":1}})");
  bad("stream_options.include_usage = \"yes\"", kCompl,
      R"({"prompt":"hello world","max_tokens":8,"stream":true,"stream_options":{"include_usage":"yes"}})");
  rows.push_back({"stream with include_usage",
                  {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"stream":true,)"
                                R"("stream_options":{"include_usage":true}})")},
                  {Expected{{200}, hw8, false, R"("usage")"}}, End::kOpen});
  bad("user as number", kCompl, R"({"prompt":"hello world","max_tokens":8,"user":42})");
  bad("model as number", kCompl, R"({"prompt":"hello world","max_tokens":8,"model":42})");
  // ---- bodies that are not a JSON object
  bad("top-level array", kCompl, "[]");
  bad("top-level string", kCompl, R"("hello world")");
  bad("top-level number", kCompl, "42");
  bad("top-level null", kCompl, "null");
  bad("top-level true", kCompl, "true");
  bad("empty body", kCompl, "");
  bad("whitespace body", kCompl, " \r\n\t ");
  bad("trailing garbage after the object", kCompl, hw + " x");
  bad("two objects", kCompl, hw + hw);
  bad("truncated JSON", kCompl, R"({"prompt":"hel)");
  // ---- encodings, NUL, surrogates
  bad("invalid UTF-8 in a string", kCompl, "{\"prompt\":\"hello \xff\xfe world\"}");
  bad("overlong UTF-8 in a string", kCompl, "{\"prompt\":\"hello \xc0\xaf\"}");
  bad("truncated UTF-8 at a string's end", kCompl, "{\"prompt\":\"hello \xe2\x82\"}");
  bad("invalid UTF-8 outside strings", kCompl, "{\"prompt\":\"hello world\",\xff}");
  bad("Latin-1 body", kCompl, "{\"prompt\":\"caf\xe9\"}");
  bad("raw NUL in a string", kCompl, "{\"prompt\":\"hello\0world\"}"s);
  bad("raw NUL between tokens", kCompl, "{\"prompt\":\"hello world\"\0}"s);
  bad("\\u0000 escape in the prompt", kCompl, R"({"prompt":"hello\u0000world","max_tokens":8})");
  bad("\\u0000 escape in chat content", kChat, R"({"messages":[{"role":"user","content":"hello\u0000world"}],"max_tokens":8})");
  bad("lone high surrogate escaped", kCompl, R"({"prompt":"hello \ud800 world"})");
  bad("lone low surrogate escaped", kCompl, R"({"prompt":"hello \udc00 world"})");
  bad("surrogate pair reversed", kCompl, R"({"prompt":"\udc00\ud800"})");
  bad("lone surrogate raw (CESU-8 bytes)", kCompl, "{\"prompt\":\"hello \xed\xa0\x80 world\"}");
  good("valid surrogate pair escaped",
       {post(kCompl, R"({"prompt":"\ud83d\ude00 hello world","max_tokens":8})")},
       oracle().expected_text("\xf0\x9f\x98\x80 hello world", 8));
  // RFC 8259 lets a parser ignore a byte order mark; nlohmann does.
  rows.push_back({"UTF-8 BOM before the JSON", {post(kCompl, "\xef\xbb\xbf" + hw)}, {Expected{{200, 400}, hw8}}, End::kOpen});
  // ---- nesting depth and sizes
  bad("100000 unclosed [ in the prompt", kCompl, R"({"prompt":)" + std::string(100000, '['));
  bad("50000-deep array as the body", kCompl, std::string(50000, '[') + std::string(50000, ']'));
  // metadata is accepted and never read: deep nesting there must neither crash nor fail the request.
  good("50000-deep array in metadata",
       {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"metadata":)" + std::string(50000, '[') +
                         std::string(50000, ']') + "}")},
       hw8);
  good("20000-deep object in metadata",
       {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"metadata":)" + repeat(R"({"a":)", 20000) + "1" +
                         std::string(20000, '}') + "}")},
       hw8);
  good("a field no one defined is ignored", {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"x":1})")}, hw8);
  // ---- extensions (vLLM, llama-server)
  good("ignore_eos false", {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"ignore_eos":false})")}, hw8);
  good("repetition_penalty 1.0 and top_k -1 (vllm bench serve)",
       {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"repetition_penalty":1.0,"top_k":-1})")}, hw8);
  good("stop_token_ids end the text", {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"stop_token_ids":[3190]})")},
       oracle().expected_text("hello world", 3));
  good("logit_bias {} and cache_prompt", {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"logit_bias":{},"cache_prompt":true})")}, hw8);
  bad("ignore_eos as string", kCompl, R"({"prompt":"hello world","ignore_eos":"yes"})");
  bad("min_tokens negative", kCompl, R"({"prompt":"hello world","min_tokens":-1})");
  bad("min_tokens as float", kCompl, R"({"prompt":"hello world","min_tokens":1.5})");
  bad("repetition_penalty 0", kCompl, R"({"prompt":"hello world","repetition_penalty":0})");
  bad("top_k -2", kCompl, R"({"prompt":"hello world","top_k":-2})");
  bad("logit_bias as string", kCompl, R"({"prompt":"hello world","logit_bias":"x"})");
  bad("logit_bias over 100", kCompl, R"({"prompt":"hello world","logit_bias":{"5":101}})");
  bad("logit_bias token out of the vocabulary", kCompl, R"({"prompt":"hello world","logit_bias":{"99999999":1}})");
  bad("logit_bias pair of three", kCompl, R"({"prompt":"hello world","logit_bias":[[1,2,3]]})");
  bad("logit_bias empty text", kCompl, R"({"prompt":"hello world","logit_bias":[["",1]]})");
  bad("stop_token_ids as number", kCompl, R"({"prompt":"hello world","stop_token_ids":5})");
  bad("stop_token_ids out of the vocabulary", kCompl, R"({"prompt":"hello world","stop_token_ids":[99999999]})");
  bad("grammar as number", kCompl, R"({"prompt":"hello world","grammar":5})");
  bad("grammar that does not parse", kCompl, R"({"prompt":"hello world","grammar":"root ::= ("})");
  bad("json_schema as string", kCompl, R"({"prompt":"hello world","json_schema":"{}"})");
  bad("grammar and json_schema", kCompl, R"({"prompt":"hello world","grammar":"root ::= \"a\"","json_schema":{}})");
  bad("n_predict -2", kCompl, R"({"prompt":"hello world","n_predict":-2})");
  bad("n_probs 21", kCompl, R"({"prompt":"hello world","n_probs":21})");
  bad("skip_special_tokens false", kCompl, R"({"prompt":"hello world","skip_special_tokens":false})");
  bad("chat_template_kwargs as array", kChat, R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":[1]})");
  bad("enable_thinking as string", kChat, R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":"no"}})");
  bad("reasoning_effort unknown", kChat, R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"max"})");
  bad("response_format json_object with a schema of 123", kChat,
      R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object","schema":123}})");
  bad("stream with a prompt longer than the context: 400 before any SSE", kCompl,
      R"({"prompt":")" + repeat(" hello", kNCtx + 100) + R"(","stream":true})");
  bad("a field umad does not implement", kChat, R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]})");
  bad("prompt over --max-prompt-bytes", kCompl, R"({"prompt":")" + std::string(kMaxPromptBytes + 100, 'a') + R"("})", 413);
  bad("prompt longer than the context", kCompl, R"({"prompt":")" + repeat(" hello", kNCtx + 100) + R"("})");
  broken("body over --http-max-body-kib",
         post(kCompl, R"({"prompt":")" + std::string(kMaxBodyKib * 1024 + 1000, 'a') + R"("})"), {413});
  broken("Content-Length over the limit, no body sent",
         raw_post(kCompl, "Content-Length: " + std::to_string(kMaxBodyKib * 1024 * 4) + "\r\n", ""), {413});
  broken("chunked body over the limit",
         raw_post(kCompl, "Transfer-Encoding: chunked\r\n",
                  chunked(std::vector<std::string>(20, std::string(16 * 1024, 'a')))),
         {413});
  // ---- Content-Length
  rows.push_back({"Content-Length larger than sent (timeout, close)",
                  {raw_post(kCompl, "Content-Length: 100\r\n", R"({"prompt":)")}, {maybe({400, 408})}, End::kClosed});
  // The first 10 bytes are the body (not JSON: 400); the rest never ends a header (timeout, close).
  rows.push_back({"Content-Length smaller than the body", {raw_post(kCompl, "Content-Length: 10\r\n", hw)},
                  {status({400}), maybe({400})}, End::kClosed});
  broken("Content-Length negative", raw_post(kCompl, "Content-Length: -5\r\n", "hello"));
  broken("Content-Length not a number", raw_post(kCompl, "Content-Length: abc\r\n", "hello"));
  broken("Content-Length with a plus sign", raw_post(kCompl, "Content-Length: +5\r\n", "hello"));
  broken("Content-Length in hex", raw_post(kCompl, "Content-Length: 0x5\r\n", "hello"));
  broken("Content-Length empty", raw_post(kCompl, "Content-Length: \r\n", "hello"));
  broken("Content-Length overflows 64 bits", raw_post(kCompl, "Content-Length: 99999999999999999999999\r\n", "hello"),
         {400, 413});
  broken("two different Content-Lengths",
         raw_post(kCompl, "Content-Length: " + std::to_string(hw.size()) + "\r\nContent-Length: 5\r\n", hw));
  broken("Content-Length list of different values", raw_post(kCompl, "Content-Length: 5, 6\r\n", "hello"));
  // RFC 9112 6.3: repeated identical values may be accepted as one, or rejected.
  rows.push_back({"two identical Content-Lengths",
                  {raw_post(kCompl, "Content-Length: " + std::to_string(hw.size()) + "\r\nContent-Length: " +
                                        std::to_string(hw.size()) + "\r\n", hw)},
                  {Expected{{200, 400}, hw8}}, End::kAny});
  broken("Transfer-Encoding chunked and Content-Length",
         raw_post(kCompl, "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", chunked({hw})));
  broken("Content-Length and Transfer-Encoding chunked",
         raw_post(kCompl, "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", chunked({hw})));
  // RFC 9112 6.1: a request whose final transfer coding is not chunked is a 400 and a close. Beast
  // ignores the field (no body): umad answers 400 for the empty body, then 400 (bad method) for
  // the body taken as the next request, and closes.
  rows.push_back({"Transfer-Encoding gzip without chunked", {raw_post(kCompl, "Transfer-Encoding: gzip\r\n", hw)},
                  {status({400}), maybe({400})}, End::kClosed});
  // ---- chunked bodies
  good("chunked body in three chunks",
       {raw_post(kCompl, "Transfer-Encoding: chunked\r\n", chunked({hw.substr(0, 5), hw.substr(5, 20), hw.substr(25)}))},
       hw8);
  broken("chunk size garbage", raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n"));
  broken("chunk size negative", raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "-5\r\nhello\r\n0\r\n\r\n"));
  broken("chunk size overflows 64 bits",
         raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "ffffffffffffffffffffff\r\nhello\r\n0\r\n\r\n"), {400, 413});
  broken("chunk size over the body limit", raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "100000\r\nhello"), {413});
  broken("chunk data longer than its size", raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "5\r\nhelloXX\r\n0\r\n\r\n"));
  broken("chunk extension with a control byte",
         raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "5;\x01\r\nhello\r\n0\r\n\r\n"));
  closes("chunk lines ending in bare LF", {raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "5\nhello\n0\n\n")});
  closes("chunked body without its last chunk, then half-close",
         {raw_post(kCompl, "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n")}, After::kHalfClose);
  // ---- header floods, long lines (Beast's 16 KiB header limit: 400 and close; 431/414 are fine too)
  {
    std::string flood;
    for (int i = 0; i < 3000; ++i) flood += "X-Flood-" + std::to_string(i) + ": v\r\n";
    broken("3000 headers", "GET /health HTTP/1.1\r\nHost: x\r\n" + flood + "\r\n", {431});
  }
  broken("one 100 KB header", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n",
         {431});
  // Beast counts the request line in its header limit, so an over-long target is 431 too (not 414).
  broken("100 KB request line", "GET /" + std::string(100000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", {431});
  // ---- targets
  rows.push_back({"GET /\\xff\\xfe (non-UTF-8 path)", {"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n"}, {status({404})},
                  End::kOpen});
  rows.push_back({"POST /v1/\\xff (non-UTF-8 path)", {post("/v1/\xff", hw)}, {status({404})}, End::kOpen});
  good("non-UTF-8 bytes in the query", {post(kCompl + "?x=\xff\xfe", hw)}, hw8);
  rows.push_back({"GET /%ff%fe", {"GET /%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n"}, {status({404})}, End::kOpen});
  broken("NUL byte in the path", "GET /\0 HTTP/1.1\r\nHost: x\r\n\r\n"s);
  broken("control byte in the path", "GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n");
  broken("space in the path", "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n");
  // ---- methods (RFC 9110: 405 for a known resource, or 501 for a method not implemented)
  rows.push_back({"unknown method BREW", {"BREW /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"},
                  {status({405, 501})}, End::kOpen});
  rows.push_back({"lowercase method post",
                  {"post /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(hw.size()) + "\r\n\r\n" + hw},
                  {status({405, 501})}, End::kOpen});
  rows.push_back({"GET /v1/completions", {"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n"}, {status({405})}, End::kOpen});
  rows.push_back({"DELETE /v1/chat/completions", {"DELETE /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"},
                  {status({405})}, End::kOpen});
  rows.push_back({"POST /health", {post("/health", "{}")}, {status({405})}, End::kOpen});
  broken("DEL byte in the method", "GE\x7fT /health HTTP/1.1\r\nHost: x\r\n\r\n");
  // ---- versions and other protocols
  rows.push_back({"HTTP/1.0 request", {"GET /health HTTP/1.0\r\n\r\n"}, {ok()}, End::kClosed});
  closes("HTTP/0.9 request line", {"GET /health\r\n"});
  // RFC 9110 6.2 allows answering HTTP/1.1 to a higher major version, or 505; Beast's parser takes
  // HTTP/1.x only (400 "bad version", then a close), which is fine too.
  rows.push_back({"HTTP/2.0 request line", {"GET /health HTTP/2.0\r\nHost: x\r\n\r\n"}, {status({200, 400, 505})},
                  End::kAny});
  broken("lowercase http/1.1", "GET /health http/1.1\r\nHost: x\r\n\r\n");
  rows.push_back({"HTTP/2 connection preface", {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
                  {maybe({400, 404, 405, 501, 505}), maybe({400})}, End::kClosed});
  rows.push_back({"Upgrade: h2c is ignored",
                  {"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                   "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"},
                  {ok()}, End::kOpen});
  {
    // A TLS 1.3 ClientHello's start: record header, handshake header, random, cipher suites, SNI.
    std::string hello = "\x16\x03\x01\x00\xc4\x01\x00\x00\xc0\x03\x03"s + std::string(32, '\x42') +
                        "\x00\x00\x04\x13\x01\x13\x02\x01\x00"s;
    hello += "\x00\x93\x00\x00\x00\x0e\x00\x0c\x00\x00\x09localhost"s + std::string(120, '\0');
    closes("TLS ClientHello on the plain port", {hello});
  }
  // ---- headers
  good("lowercase header names",
       {"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: " +
        std::to_string(hw.size()) + "\r\n\r\n" + hw},
       hw8);
  good("odd-case header names",
       {"POST /v1/completions HTTP/1.1\r\nhOsT: x\r\nCoNtEnT-tYpE: application/json\r\ncOnTeNt-LeNgTh: " +
        std::to_string(hw.size()) + "\r\n\r\n" + hw},
       hw8);
  broken("space before a header's colon", "GET /health HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n");
  broken("header line without a colon", "GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n");
  broken("header name with a bad character", "GET /health HTTP/1.1\r\nHost: x\r\nX(A): b\r\n\r\n");
  broken("NUL in a header value", "GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n"s);
  rows.push_back({"obs-text bytes in a header value", {"GET /health HTTP/1.1\r\nHost: x\r\nX-A: \xff\xfe\r\n\r\n"}, {ok()},
                  End::kOpen});
  // RFC 9112 5.2: an obsolete line folding is rejected (400) or replaced by a space.
  rows.push_back({"obs-fold header continuation", {"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"},
                  {status({200, 400})}, End::kAny});
  // RFC 9112 2.2: a bare LF may be taken as a line end; Beast waits for CRLF CRLF (timeout).
  rows.push_back({"request with bare LF line ends", {"GET /health HTTP/1.1\nHost: x\n\n"}, {maybe({200, 400, 408})}, End::kAny});
  rows.push_back({"empty line before the request line", {"\r\n" + kHealth}, {status({200, 400})}, End::kAny});
  good("Expect: 100-continue, body sent after the headers",
       {raw_post(kCompl, "Expect: 100-continue\r\nContent-Length: " + std::to_string(hw.size()) + "\r\n", ""), hw}, hw8);
  rows.push_back({"Expect: an unknown expectation",
                  {raw_post(kCompl, "Expect: bogus\r\nContent-Length: " + std::to_string(hw.size()) + "\r\n", hw)},
                  {Expected{{200, 417}, hw8}}, End::kAny});
  rows.push_back({"GET with a body, then another request",
                  {"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                   "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"},
                  {ok(), ok()}, End::kOpen});
  rows.push_back({"Connection: close", {post(kCompl, hw, false)}, {ok(hw8)}, End::kClosed});
  // ---- pipelining
  rows.push_back({"two completions pipelined in one write",
                  {post(kCompl, hw) + post(kCompl, R"({"prompt":"hello","max_tokens":4})")},
                  {ok(hw8), ok(oracle().expected_text("hello", 4))}, End::kOpen});
  rows.push_back({"health, completion, models pipelined",
                  {kHealth + post(kCompl, hw) + "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"}, {ok(), ok(hw8), ok()},
                  End::kOpen});
  rows.push_back({"bad JSON then a completion, pipelined", {post(kCompl, "{bad") + post(kCompl, hw)},
                  {status({400}), ok(hw8)}, End::kOpen});
  rows.push_back({"streamed completion then a completion, pipelined",
                  {post(kCompl, R"({"prompt":"hello world","max_tokens":8,"stream":true})") + post(kCompl, hw)},
                  {ok(hw8), ok(hw8)}, End::kOpen});
  rows.push_back({"garbage request then health, pipelined", {"NOT HTTP AT ALL\r\n\r\n" + kHealth}, {status({400})},
                  End::kClosed});
  // ---- pieces, half-sent requests
  {
    const std::string req = post(kCompl, hw);
    std::vector<std::string> bytes;
    for (char ch : req) bytes.emplace_back(1, ch);
    good("request in 1-byte pieces", bytes, hw8);
    const std::string utf8 = R"({"prompt":"héllo world","max_tokens":8})";
    const std::string whole = post(kCompl, utf8);
    const std::size_t split = whole.find("\xc3") + 1;  // inside the two bytes of 'é'
    good("body split inside a UTF-8 sequence", {whole.substr(0, split), whole.substr(split)},
         oracle().expected_text("héllo world", 8));
    rows.push_back({"headers half sent, then closed", {req.substr(0, 40)}, {}, End::kAny, After::kClose});
    rows.push_back({"body half sent, then closed", {req.substr(0, req.size() - 10)}, {}, End::kAny, After::kClose});
    closes("headers half sent, then half-closed", {req.substr(0, 40)}, After::kHalfClose);
    closes("body half sent, then half-closed", {req.substr(0, req.size() - 10)}, After::kHalfClose);
    closes("body half sent, then left (server timeout)", {req.substr(0, req.size() - 10)});
    closes("request line only, then left (server timeout)", {"GET /health HTTP/1.1\r\n"});
    closes("connected, nothing sent (server timeout)", {});
  }
  return rows;
}

}  // namespace uma::test::malformed
