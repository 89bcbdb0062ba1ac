// httpkit's wire pieces on their own: the request and response readers fed in every split (their
// "need more" contract), their limits and typed errors, SSE splitting, the access policy.
#include "httpkit/http_wire.h"

#include <gtest/gtest.h>

#include "httpkit/access.h"

namespace uma {
namespace {

constexpr std::string_view kTwo =
    "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\nContent-Length: 5\r\n\r\nhello"
    "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";

TEST(RequestReader, GivesEachPipelinedRequestWholeWhateverTheSplit) {
  for (std::size_t cut = 0; cut <= kTwo.size(); ++cut) {
    RequestReader r;
    HttpRequest req;
    Status error;
    r.feed(kTwo.substr(0, cut));
    RequestReader::Result first = r.next(HttpLimits{}, &req, &error);
    if (first == RequestReader::Result::kNeedMore) {
      r.feed(kTwo.substr(cut));
      first = r.next(HttpLimits{}, &req, &error);
    } else {
      r.feed(kTwo.substr(cut));
    }
    ASSERT_EQ(first, RequestReader::Result::kRequest) << cut;
    EXPECT_EQ(req.method, boost::beast::http::verb::post);
    EXPECT_EQ(req.path, "/v1/completions");
    EXPECT_EQ(req.query, "x=1");
    EXPECT_EQ(req.body, "hello");
    EXPECT_TRUE(req.keep_alive);
    EXPECT_EQ(req.header("authorization"), "Bearer k");
    bool present = true;
    EXPECT_EQ(req.header("x-api-key", &present), "");
    EXPECT_FALSE(present);
    HttpRequest second;
    ASSERT_EQ(r.next(HttpLimits{}, &second, &error), RequestReader::Result::kRequest) << cut;
    EXPECT_EQ(second.path, "/health");
    EXPECT_FALSE(second.keep_alive);
    EXPECT_EQ(r.next(HttpLimits{}, &second, &error), RequestReader::Result::kNeedMore);
  }
}

// A chunked body fed a byte at a time: Beast's chunk parser once asserted on a final chunk's line
// given again with fewer than 5 bytes (found by the HTTP fuzzer).
TEST(RequestReader, AChunkedBodyFedAByteAtATimeIsReadWhole) {
  const std::string chunked =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
  for (const std::string& body_start : {std::string("5\r\n"), std::string("0\r\n")}) {
    const std::string text = body_start == "0\r\n" ? chunked.substr(0, chunked.find("5\r\n")) + "0\r\n\r\n" : chunked;
    RequestReader r;
    HttpRequest req;
    Status error;
    RequestReader::Result result = RequestReader::Result::kNeedMore;
    for (std::size_t i = 0; i < text.size() && result == RequestReader::Result::kNeedMore; ++i) {
      r.feed(text.substr(i, 1));
      result = r.next(HttpLimits{}, &req, &error);
    }
    ASSERT_EQ(result, RequestReader::Result::kRequest) << error.message();
    EXPECT_EQ(req.body, body_start == "5\r\n" ? "hello" : "");
  }
}

TEST(ClientRequest, WhatAClientBuildsTheServersReaderReadsBack) {
  RequestReader r;
  r.feed(http_request({.method = "POST", .target = "/load?x=1", .host = "10.0.0.2:8090", .body = R"({"model":"m"})",
                       .bearer = "key", .extra = "Accept: text/event-stream\r\n", .keep_alive = false}));
  r.feed(http_request({.method = "GET", .target = "/models", .host = "h:1"}));
  r.feed(http_request({.method = "POST", .target = "/unload", .host = "h:1"}));
  HttpRequest req;
  Status error;
  ASSERT_EQ(r.next(HttpLimits{}, &req, &error), RequestReader::Result::kRequest);
  EXPECT_EQ(req.method, boost::beast::http::verb::post);
  EXPECT_EQ(req.target, "/load?x=1");
  EXPECT_EQ(req.header("host"), "10.0.0.2:8090");
  EXPECT_EQ(req.header("content-type"), "application/json");
  EXPECT_EQ(req.body, R"({"model":"m"})");
  EXPECT_EQ(req.header("authorization"), "Bearer key");
  EXPECT_EQ(req.header("accept"), "text/event-stream");
  EXPECT_FALSE(req.keep_alive);
  ASSERT_EQ(r.next(HttpLimits{}, &req, &error), RequestReader::Result::kRequest);
  EXPECT_EQ(req.method, boost::beast::http::verb::get);
  EXPECT_EQ(req.path, "/models");
  EXPECT_TRUE(req.body.empty());
  bool present = true;
  req.header("authorization", &present);
  EXPECT_FALSE(present);
  EXPECT_TRUE(req.keep_alive);
  ASSERT_EQ(r.next(HttpLimits{}, &req, &error), RequestReader::Result::kRequest);  // a POST without a body has its length
  EXPECT_EQ(req.path, "/unload");
  EXPECT_EQ(r.next(HttpLimits{}, &req, &error), RequestReader::Result::kNeedMore);
}

TEST(RequestReader, LimitsAndGarbageAreTypedErrors) {
  HttpRequest req;
  Status error;
  bool header = false;
  RequestReader body;
  body.feed("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n");
  EXPECT_EQ(body.next(HttpLimits{1024, 10}, &req, &error, &header), RequestReader::Result::kError);
  EXPECT_EQ(error.code(), ErrorCode::kPromptTooLarge);
  EXPECT_FALSE(header);
  RequestReader head;
  head.feed("GET / HTTP/1.1\r\nX-Long: " + std::string(2000, 'a') + "\r\n\r\n");
  EXPECT_EQ(head.next(HttpLimits{512, 10}, &req, &error, &header), RequestReader::Result::kError);
  EXPECT_EQ(error.code(), ErrorCode::kBadRequest);
  EXPECT_TRUE(header);
  RequestReader junk;
  junk.feed("\x01\x02 nonsense\r\n\r\n");
  EXPECT_EQ(junk.next(HttpLimits{}, &req, &error, &header), RequestReader::Result::kError);
  EXPECT_FALSE(header);
  EXPECT_NE(error.message().find("malformed"), std::string::npos) << error.message();
}

TEST(ResponseReader, HandsOnChunkedAndSizedBodiesAsTheyComeAndSplitsTheirEvents) {
  const std::string stream = event_stream_head(true) + sse_chunk("{\"a\":1}") + http_chunk(": ping\n\n") +
                             sse_chunk("[DONE]") + std::string(kLastChunk);
  const std::string sized = http_reply(404, "application/json", "{\"error\":1}", false);
  const std::string both = stream + sized;
  for (std::size_t cut = 0; cut <= both.size(); cut += 7) {
    ResponseReader rx;
    SseSplitter sse;
    std::string body, error, data;
    rx.feed(std::string_view(both).substr(0, cut));
    ASSERT_TRUE(rx.pump(&body, &error)) << error;
    rx.feed(std::string_view(both).substr(cut));
    ASSERT_TRUE(rx.pump(&body, &error)) << error;
    ASSERT_TRUE(rx.done()) << cut;
    EXPECT_EQ(rx.status(), 200u);
    EXPECT_TRUE(rx.event_stream());
    EXPECT_TRUE(rx.keep_alive());
    sse.feed(body);
    ASSERT_TRUE(sse.next(&data));
    EXPECT_EQ(data, "{\"a\":1}");
    ASSERT_TRUE(sse.next(&data));
    EXPECT_EQ(data, "[DONE]");
    EXPECT_FALSE(sse.next(&data));
    EXPECT_EQ(rx.buffered(), sized.size()) << "the next response stays buffered";
    rx.reset();
    body.clear();
    ASSERT_TRUE(rx.pump(&body, &error)) << error;
    ASSERT_TRUE(rx.done());
    EXPECT_EQ(rx.status(), 404u);
    EXPECT_FALSE(rx.keep_alive());
    EXPECT_EQ(body, "{\"error\":1}");
  }
}

TEST(ResponseReader, ABodyWithoutALengthEndsWithTheConnectionAndGarbageIsAnError) {
  ResponseReader rx;
  std::string body, error;
  rx.feed("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nsome");
  ASSERT_TRUE(rx.pump(&body, &error));
  EXPECT_TRUE(rx.reads_to_eof());
  EXPECT_FALSE(rx.done());
  EXPECT_TRUE(rx.eof());
  EXPECT_EQ(body, "some");
  ResponseReader cut;
  cut.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  ASSERT_TRUE(cut.pump(&body, &error));
  EXPECT_FALSE(cut.eof()) << "a sized body cut short is not whole";
  ResponseReader bad;
  bad.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
  EXPECT_FALSE(bad.pump(&body, &error));
  EXPECT_NE(error.find("bad HTTP response"), std::string::npos);
}

HttpRequest request(std::string_view text) {
  RequestReader r;
  r.feed(text);
  HttpRequest req;
  Status error;
  EXPECT_EQ(r.next(HttpLimits{}, &req, &error), RequestReader::Result::kRequest);
  return req;
}

TEST(Access, AKeyInEitherHeaderOpenPathsAndPreflightsBeforeTheKey) {
  const AccessPolicy policy{"s3cret", "https://app.example", {"/health"}};
  using V = AccessCheck::Verdict;
  EXPECT_EQ(check_access(policy, request("GET /v1/models HTTP/1.1\r\n\r\n")).verdict, V::kUnauthorized);
  EXPECT_EQ(check_access(policy, request("GET /v1/models HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n")).verdict, V::kPass);
  EXPECT_EQ(check_access(policy, request("GET /v1/models HTTP/1.1\r\nx-api-key: s3cret\r\n\r\n")).verdict, V::kPass);
  EXPECT_EQ(check_access(policy, request("GET /v1/models HTTP/1.1\r\nAuthorization: Bearer s3cre\r\n\r\n")).verdict, V::kUnauthorized);
  EXPECT_EQ(check_access(policy, request("GET /v1/models HTTP/1.1\r\nAuthorization: s3cret\r\n\r\n")).verdict, V::kUnauthorized);
  EXPECT_EQ(check_access(policy, request("GET /health HTTP/1.1\r\n\r\n")).verdict, V::kPass);
  const AccessCheck pre = check_access(policy, request("OPTIONS /v1/models HTTP/1.1\r\nOrigin: https://app.example\r\n\r\n"));
  EXPECT_EQ(pre.verdict, V::kPreflight);
  EXPECT_NE(pre.cors.find("Access-Control-Allow-Origin: https://app.example\r\n"), std::string::npos);
  EXPECT_EQ(check_access(policy, request("GET /health HTTP/1.1\r\nOrigin: https://other.example\r\n\r\n")).cors, "");
  EXPECT_EQ(check_access(AccessPolicy{}, request("OPTIONS / HTTP/1.1\r\n\r\n")).verdict, V::kPass) << "no CORS: not special";
}

}  // namespace
}  // namespace uma
