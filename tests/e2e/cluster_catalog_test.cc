// The gateway and the model catalog (cluster/model_catalog.h), real processes: /v1/models lists
// the catalog beside what the agents serve; once the cluster has a catalog, a model that is
// neither served nor in it is a 404 in OpenAI's shape, and one only in the catalog (loaded
// nowhere) a 503 until agents load on demand. A cluster without a catalog routes any name to its
// agents, as one llama-server accepts any model name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cluster/model_catalog.h"
#include "e2e/cluster_harness.h"
#include "e2e/http_client.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string complete_as(int port, const std::string& model) {
  Tcp t(port);
  EXPECT_TRUE(t.send(post("/v1/completions", json({{"model", model}, {"prompt", "the river"}, {"max_tokens", 6}}).dump())));
  return t.response();
}

TEST(ClusterCatalog, UnknownModelsAre404sOnceTheClusterHasACatalogWhichModelsLists) {
  LocalCluster c;
  ASSERT_TRUE(c.up(1, 1)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const int port = c.gateways[0]->port();
  std::string r = complete_as(port, "gpt-4o");
  ASSERT_EQ(status_of(r), 200) << r << "\n(no catalog yet: any name goes to the agents)";
  EXPECT_EQ(json::parse(body_of(r))["choices"][0]["text"], oracle().expected_text("the river", 6));

  store::Manifest m;
  ASSERT_TRUE(store::build_manifest(model_path("oracle.gguf"), "oracle-cold", 1 << 20, 2, &m).ok());
  cluster::RedisAddress addr;
  ASSERT_TRUE(cluster::parse_redis_address(c.redis.address(), &addr));
  cluster::RedisClient rc(addr, std::chrono::milliseconds(1000));
  ASSERT_TRUE(cluster::catalog_put(rc, m, "").ok());
  ASSERT_TRUE(wait_for([&] { return http_get(port, "/v1/models").find("oracle-cold") != std::string::npos; }, 5s))
      << http_get(port, "/v1/models");
  const json models = json::parse(body_of(http_get(port, "/v1/models")));
  std::vector<std::string> ids;
  for (const json& e : models["data"]) ids.push_back(e["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"oracle-cold", "oracle.gguf"}));

  r = complete_as(port, "gpt-4o");
  EXPECT_EQ(status_of(r), 404) << r;
  const json err = json::parse(body_of(r))["error"];
  EXPECT_EQ(err["code"], "model_not_found");
  EXPECT_EQ(err["type"], "invalid_request_error");
  EXPECT_EQ(err["param"], "model");
  EXPECT_NE(err["message"].get<std::string>().find("gpt-4o"), std::string::npos);
  r = complete_as(port, "oracle-cold");
  EXPECT_EQ(status_of(r), 503) << r;
  r = complete_as(port, "oracle.gguf");
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(json::parse(body_of(r))["choices"][0]["text"], oracle().expected_text("the river", 6));
}

}  // namespace
}  // namespace uma::test
