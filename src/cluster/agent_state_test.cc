// The agent's soft state through Redis: what the agent encodes the gateway decodes, whole; what
// anyone else wrote under the key is a typed error naming the field, never a crash.
#include "cluster/agent_state.h"

#include <gtest/gtest.h>

namespace uma::cluster {
namespace {

TEST(AgentState, RoundTrips) {
  AgentState a;
  a.id = "gpu-3";
  a.address = "http://10.0.0.3:8080";
  a.boot_id = "0123456789abcdef";
  a.ts_ms = 1795400099062;
  a.models = {{"llama-8b.gguf", 8'500'000'000, ModelState::kLoaded, store::Tier::kDram}, {"qwen.gguf", 1'000, ModelState::kRemote, store::Tier::kNvme}};
  a.prefill_tok_s = 9123.5;
  a.decode_tok_s = 812.25;
  a.max_sessions = 16;
  a.active_sessions = 7;
  a.queued_sessions = 2;
  a.prefill_backlog_tokens = 4096;
  a.kv_cells_used = 1000;
  a.kv_cells_total = 65536;
  a.free_memory_bytes = 1 << 30;
  a.load_nvme_bytes_s = 1.9e9;
  a.load_remote_bytes_s = 2.2e8;
  a.load_queue_bytes = 4'108'922'752;
  AgentState b;
  ASSERT_TRUE(decode_agent_state(encode_agent_state(a), &b).ok());
  EXPECT_EQ(b.id, a.id);
  EXPECT_EQ(b.address, a.address);
  EXPECT_EQ(b.boot_id, a.boot_id);
  EXPECT_EQ(b.ts_ms, a.ts_ms);
  ASSERT_EQ(b.models.size(), 2u);
  EXPECT_EQ(b.models[1].name, "qwen.gguf");
  EXPECT_EQ(b.models[1].tier, store::Tier::kNvme);
  EXPECT_EQ(b.models[0].bytes, 8'500'000'000);
  EXPECT_DOUBLE_EQ(b.prefill_tok_s, a.prefill_tok_s);
  EXPECT_EQ(b.prefill_backlog_tokens, 4096);
  EXPECT_EQ(b.max_sessions, 16);
  EXPECT_EQ(b.active_sessions, 7);
  EXPECT_EQ(b.kv_cells_total, 65536);
  EXPECT_DOUBLE_EQ(b.load_nvme_bytes_s, 1.9e9);
  EXPECT_DOUBLE_EQ(b.load_remote_bytes_s, 2.2e8);
  EXPECT_DOUBLE_EQ(b.load_dram_bytes_s, 0.0);
  EXPECT_EQ(b.load_queue_bytes, 4'108'922'752);
  ASSERT_NE(b.model("qwen.gguf"), nullptr);
  EXPECT_EQ(b.model("nope"), nullptr);
}

TEST(AgentState, SomethingElseUnderTheKeyIsATypedError) {
  AgentState s;
  EXPECT_EQ(decode_agent_state("not json", &s).code(), ErrorCode::kInvalidJson);
  EXPECT_EQ(decode_agent_state("[1,2]", &s).code(), ErrorCode::kInvalidJson);
  const std::pair<const char*, const char*> cases[] = {
      {R"({"address":"a","boot_id":"b","models":[]})", "id"},
      {R"({"id":1,"address":"a","boot_id":"b","models":[]})", "id"},
      {R"({"id":"x","address":"a","boot_id":"b","models":{}})", "models"},
      {R"({"id":"x","address":"a","boot_id":"b","models":[{"bytes":1}]})", "models[].name"},
      {R"({"id":"x","address":"a","boot_id":"b","models":[{"name":"m","tier":"tape"}]})", "models[].tier"},
      {R"({"id":"x","address":"a","boot_id":"b","models":[],"prefill_tok_s":"fast"})", "prefill_tok_s"},
  };
  for (const auto& [text, field] : cases) {
    const Status st = decode_agent_state(text, &s);
    EXPECT_EQ(st.code(), ErrorCode::kBadRequest) << text;
    EXPECT_EQ(st.param(), field) << text;
  }
}

}  // namespace
}  // namespace uma::cluster
