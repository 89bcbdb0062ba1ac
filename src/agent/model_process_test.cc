#include "agent/model_process.h"

#include <gtest/gtest.h>

namespace uma::agent {
namespace {

TEST(StatusEvent, EachNameAUmadWritesIsParsedOnceAndAnyOtherIsUnknown) {
  EXPECT_EQ(parse_status_event("standby"), StatusEvent::kStandby);
  EXPECT_EQ(parse_status_event("pinned"), StatusEvent::kPinned);
  EXPECT_EQ(parse_status_event("ready"), StatusEvent::kReady);
  EXPECT_EQ(parse_status_event("busy"), StatusEvent::kBusy);
  EXPECT_EQ(parse_status_event("idle"), StatusEvent::kIdle);
  EXPECT_EQ(parse_status_event("stopping"), StatusEvent::kStopping);
  for (const char* other : {"", "Ready", "ready ", "unloaded"}) EXPECT_EQ(parse_status_event(other), StatusEvent::kUnknown) << other;
}

}  // namespace
}  // namespace uma::agent
