// uma-gw's client access: a key (Bearer or x-api-key; /health open) and CORS for browser front
// ends, on the gateway's own answers and on those it relays from agents.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <iostream>

#include "e2e/cluster_harness.h"
#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

TEST(ClusterAccess, TheGatewaysKeyAndCorsCoverItsOwnAndRelayedAnswers) {
  LocalCluster c;
  ASSERT_TRUE(c.up(1, 1, {}, {"--api-key", "sesame", "--cors-origin", "*"})) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  ASSERT_TRUE(c.all_live(1));
  Tcp t(c.gateways[0]->port());
  const std::string body = R"({"prompt":"the river","max_tokens":4,"stream":true})";
  auto send = [&](const std::string& headers) {
    EXPECT_TRUE(t.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n" + headers +
                       "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    return t.response();
  };
  std::string r = send("");
  EXPECT_EQ(status_of(r), 401) << r;
  EXPECT_NE(head_of(r).find("Access-Control-Allow-Origin: *"), std::string::npos) << "a browser may read the 401";
  EXPECT_EQ(json::parse(body_of(r))["error"]["type"], "authentication_error") << r;
  r = send("Authorization: Bearer wrong\r\n");
  EXPECT_EQ(status_of(r), 401) << r;
  r = send("x-api-key: sesame\r\n");
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_NE(head_of(r).find("Access-Control-Allow-Origin: *"), std::string::npos) << "the relayed stream's head: " << r;
  r = send("Authorization: Bearer sesame\r\n");
  ASSERT_EQ(status_of(r), 200) << r;
  ASSERT_TRUE(t.send("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
                     "Access-Control-Request-Method: POST\r\n\r\n"));
  r = t.response();
  EXPECT_EQ(status_of(r), 204) << "a preflight needs no key: " << r;
  EXPECT_NE(r.find("Access-Control-Allow-Headers: Authorization"), std::string::npos) << r;
  ASSERT_TRUE(t.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(t.response()), 200) << "health is open";
  // The gateway's page behind its key: a call without it refused and said so, a chat with it.
  if (!webui_test_available()) {
    std::cout << "(no puppeteer-core or chromium here: the keyed page is not driven)\n";
    return;
  }
  std::string out;
  EXPECT_EQ(run_webui_test(c.gateways[0]->url(), "sesame", temp_dir(), &out, {"http://127.0.0.1:" + std::to_string(c.agent_port(0))}), 0)
      << out;
  EXPECT_NE(out.find("webui: all passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace uma::test
