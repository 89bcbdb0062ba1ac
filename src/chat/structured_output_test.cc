// JSON schema -> GBNF through llama.cpp's converter: a grammar with a root rule, or a typed error.
#include "chat/structured_output.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(StructuredOutput, ASchemaBecomesAGrammarWithARootRule) {
  std::string gbnf;
  ASSERT_TRUE(json_schema_to_gbnf(R"({"type":"object","properties":{"c":{"enum":["red","blue"]}},"required":["c"]})", &gbnf).ok());
  EXPECT_NE(gbnf.find("root ::="), std::string::npos) << gbnf;
  EXPECT_NE(gbnf.find("red"), std::string::npos) << gbnf;
  ASSERT_TRUE(json_schema_to_gbnf(kAnyJsonObjectSchema, &gbnf).ok());
  EXPECT_NE(gbnf.find("root ::="), std::string::npos);
}

TEST(StructuredOutput, WhatIsNotASchemaIsABadRequest) {
  std::string gbnf;
  EXPECT_EQ(json_schema_to_gbnf("{", &gbnf).code(), ErrorCode::kBadRequest);
  EXPECT_EQ(json_schema_to_gbnf("[1,2]", &gbnf).code(), ErrorCode::kBadRequest);
  const Status st = json_schema_to_gbnf(R"({"properties":{"a":{"$ref":"#/nowhere"}}})", &gbnf);
  EXPECT_EQ(st.code(), ErrorCode::kBadRequest);
  EXPECT_NE(st.message().find("nowhere"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace uma
