// umad serving a catalog model (--model-id) through the model store: the first start fetches it
// from the remote tier (a real nginx) onto its NVMe tier while loading, the next start reads it
// from there, and both serve the oracle's exact continuation. An unknown id stops umad with a
// clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cluster/agent_state.h"
#include "cluster/model_catalog.h"
#include "e2e/cluster_harness.h"
#include "e2e/daemon_harness.h"
#include "e2e/nginx_harness.h"
#include "e2e/oracle.h"
#include "e2e/redis_harness.h"

namespace uma::test {
namespace {

namespace fs = std::filesystem;

TEST(StoreDaemon, ServesACatalogModelFromTheRemoteTierThenFromItsNvmeTierExactly) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no nginx or no libcurl here";
  RedisServer redis;
  ASSERT_TRUE(redis.start());
  NginxServer nginx;
  ASSERT_TRUE(nginx.start()) << nginx.log();
  fs::copy_file(model_path("oracle.gguf"), fs::path(nginx.root()) / "oracle.gguf");
  store::Manifest m;
  ASSERT_TRUE(store::build_manifest(model_path("oracle.gguf"), "oracle-1", 1 << 20, 2, &m).ok());
  cluster::RedisAddress addr;
  ASSERT_TRUE(cluster::parse_redis_address(redis.address(), &addr));
  cluster::RedisClient rc(addr, kHangGuard);
  ASSERT_TRUE(cluster::catalog_put(rc, m, nginx.url("oracle.gguf")).ok());
  const std::string dir = temp_dir() + "/store-daemon-nvme";
  fs::remove_all(dir);
  const std::vector<std::string> args = {"--model-id", "oracle-1", "--redis", redis.address(), "--store-dir", dir,
                                         "--max-tokens", "16", "--http", "127.0.0.1:0", "--agent", "--agent-calibrate-ms", "0"};
  for (const char* from : {"from remote", "from nvme"}) {
    Daemon d(args, "");
    ASSERT_TRUE(d.started()) << d.log();
    // Its beat says where the model's bytes are now and how fast the tier it came from loaded.
    cluster::AgentState beat;
    ASSERT_TRUE(eventually([&] {
      cluster::RedisReply ids, v;
      if (!rc.command({"SMEMBERS", "uma:agents"}, &ids).ok() || ids.elements.size() != 1) return false;
      return rc.command({"GET", "uma:agent:" + ids.elements[0].str}, &v).ok() && v.kind == cluster::RedisReply::Kind::kString &&
             cluster::decode_agent_state(v.str, &beat).ok();
    }, "its beat in Redis")) << d.log();
    ASSERT_EQ(beat.models.size(), 1u);
    EXPECT_EQ(beat.models[0].name, "oracle-1");
    EXPECT_EQ(beat.models[0].bytes, static_cast<std::int64_t>(m.bytes));
    EXPECT_EQ(beat.models[0].tier, store::Tier::kNvme) << "the fetch left it on the NVMe tier; no DRAM budget keeps the image";
    EXPECT_GT(std::string(from) == "from remote" ? beat.load_remote_bytes_s : beat.load_nvme_bytes_s, 0.0);
    EXPECT_EQ(beat.load_queue_bytes, 0);
    Client c(d.socket());
    ASSERT_TRUE(c.send("hello world\n"));
    const auto line = c.read_line();
    ASSERT_TRUE(line.has_value()) << d.log();
    EXPECT_EQ(*line, oracle().expected_reply("hello world", 16));
    EXPECT_EQ(d.stop(), 0) << d.log();
    EXPECT_NE(d.log().find("model store: oracle-1"), std::string::npos) << d.log();
    EXPECT_NE(d.log().find(from), std::string::npos) << d.log();
    EXPECT_EQ(slurp(dir + "/oracle-1.gguf"), slurp(model_path("oracle.gguf"))) << "the NVMe tier holds the verified file";
  }
  Daemon unknown({"--model-id", "no-such-model", "--redis", redis.address()}, "");
  EXPECT_FALSE(unknown.started());
  EXPECT_NE(unknown.log().find("no-such-model"), std::string::npos) << unknown.log();
  EXPECT_NE(unknown.log().find("not in the catalog"), std::string::npos) << unknown.log();
}

// The catalog's Redis with a password (requirepass): every binary reads it from a file (never the
// command line); without it, a clear refusal.
TEST(StoreDaemon, ARedisWithAPasswordIsReachedThroughItsFileAndRefusedWithout) {
  RedisServer redis("s3cret pass");
  ASSERT_TRUE(redis.start());
  const std::string pw = temp_dir() + "/redis-password";
  std::ofstream(pw) << "s3cret pass\n";
  cluster::RedisAddress bare, authed;
  ASSERT_TRUE(cluster::parse_redis_address(redis.address(), &bare));
  ASSERT_TRUE(cluster::redis_address_from_flags(redis.address(), pw, "", &authed).ok());
  std::vector<cluster::CatalogModel> all;
  cluster::RedisClient no_auth(bare, kHangGuard);
  const Status refused = cluster::catalog_list(no_auth, &all);
  EXPECT_EQ(refused.code(), ErrorCode::kIo);
  EXPECT_NE(refused.message().find("NOAUTH"), std::string::npos) << refused.to_string();
  cluster::RedisClient rc(authed, kHangGuard);
  store::Manifest m;
  ASSERT_TRUE(store::build_manifest(model_path("oracle.gguf"), "oracle-pw", 1 << 20, 2, &m).ok());
  ASSERT_TRUE(cluster::catalog_put(rc, m, "").ok());

  std::string out;
  EXPECT_EQ(run_command({bin_path("uma-store"), "--redis-password-file", pw, "ls", "--redis", redis.address()}, &out), 0) << out;
  EXPECT_NE(out.find("oracle-pw"), std::string::npos) << out;
  EXPECT_NE(run_command({bin_path("uma-store"), "ls", "--redis", redis.address()}, &out), 0);
  EXPECT_NE(out.find("NOAUTH"), std::string::npos) << out;

  // umad reads its catalog model with the password; the NVMe tier already holds the file.
  const std::string dir = temp_dir() + "/store-daemon-pw";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(model_path("oracle.gguf"), dir + "/oracle-pw.gguf");
  Daemon d({"--model-id", "oracle-pw", "--redis", redis.address(), "--redis-password-file", pw, "--store-dir", dir,
            "--max-tokens", "8"}, "");
  ASSERT_TRUE(d.started()) << d.log();
  Client c(d.socket());
  ASSERT_TRUE(c.send("hello world\n"));
  EXPECT_EQ(c.read_line().value_or(""), oracle().expected_reply("hello world", 8));
  EXPECT_EQ(d.stop(), 0) << d.log();
  EXPECT_NE(d.log().find("from nvme"), std::string::npos) << d.log();
  Daemon refused_daemon({"--model-id", "oracle-pw", "--redis", redis.address(), "--store-dir", dir}, "");
  EXPECT_FALSE(refused_daemon.started());
  EXPECT_NE(refused_daemon.log().find("NOAUTH"), std::string::npos) << refused_daemon.log();
}

}  // namespace
}  // namespace uma::test
