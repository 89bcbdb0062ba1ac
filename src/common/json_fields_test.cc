// The shared typed JSON reads: integers that are JSON integers in range (never 1.0 nor a huge
// unsigned wrapped negative), token-id arrays, and JsonFields' errors naming the field.
#include "common/json_fields.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace uma {
namespace {

using json = nlohmann::json;

TEST(JsonFields, IntegersAndTokenIdsAreReadStrictly) {
  std::int64_t v = 7;
  EXPECT_TRUE(json_integer(json(5), 0, 10, &v));
  EXPECT_EQ(v, 5);
  EXPECT_FALSE(json_integer(json(5.0), 0, 10, &v)) << "1.0 is not an integer here";
  EXPECT_FALSE(json_integer(json(11), 0, 10, &v));
  EXPECT_FALSE(json_integer(json(18446744073709551615ull), -1, 10, &v)) << "a huge unsigned does not wrap to -1";
  EXPECT_FALSE(json_integer(json("5"), 0, 10, &v));
  std::vector<std::int32_t> ids;
  EXPECT_TRUE(json_token_ids(json::parse("[0, 5, 2147483647]"), &ids));
  EXPECT_EQ(ids, (std::vector<std::int32_t>{0, 5, 2147483647}));
  for (const char* bad : {"[-1]", "[2147483648]", "[1.5]", "[\"1\"]", "{}", "3"}) {
    std::vector<std::int32_t> out;
    EXPECT_FALSE(json_token_ids(json::parse(bad), &out)) << bad;
  }
  std::vector<std::int32_t> small;
  EXPECT_FALSE(json_token_ids(json::parse("[1, 2, 3]"), &small, 2)) << "an id over max_id";
  EXPECT_FALSE(json_token_ids(json::parse("[1, 2, 3]"), &small, 100, 2)) << "more than max_count";
}

TEST(JsonFields, ErrorsNameTheField) {
  const json j = json::parse(R"({"name": 3, "n": 2.5, "m": 4})");
  const JsonFields<json> f(j, "thing");
  std::string s;
  const Status st = f.string("name", &s);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_EQ(st.param(), "name");
  EXPECT_EQ(st.message(), "thing: 'name' is missing or of the wrong type");
  std::int64_t i = 1;
  EXPECT_EQ(f.integer("n", 0, 10, &i).param(), "n");
  EXPECT_TRUE(f.integer("m", 0, 10, &i).ok());
  EXPECT_EQ(i, 4);
  EXPECT_TRUE(f.integer("absent", 0, 10, &i).ok());
  EXPECT_EQ(i, 4) << "absent leaves it as it was";
}

}  // namespace
}  // namespace uma
