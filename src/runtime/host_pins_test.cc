#include "runtime/host_pins.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace uma {
namespace {

// A GPU backend's registration, faked below our interface: what is registered, and its bytes.
std::map<void*, std::size_t>& registered() {
  static std::map<void*, std::size_t> r;
  return r;
}
bool fake_add(void* p, std::size_t n) {
  registered()[p] = n;
  return true;
}
void fake_remove(void* p) { registered().erase(p); }
bool refuse_add(void*, std::size_t) { return false; }

int memfd_with(const std::string& bytes) {
  const int fd = ::memfd_create("image", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  return fd;
}

struct HostPinsTest : ::testing::Test {
  void SetUp() override { registered().clear(); }
  void TearDown() override {
    for (int fd : fds) ::close(fd);
  }
  int image(const std::string& bytes) { return fds.emplace_back(memfd_with(bytes)); }
  std::vector<int> fds;
};

TEST_F(HostPinsTest, ASetPinsItsImagesAndTheNextReleasesWhatItNoLongerNames) {
  HostPins pins({fake_add, fake_remove});
  const int a = image("weights of a"), b = image("weights of b!"), c = image("c");
  EXPECT_EQ(pins.set({a, b}), 2);
  EXPECT_EQ(registered().size(), 2u);
  std::map<void*, std::size_t> first = registered();
  EXPECT_EQ(pins.set({b, c, b}), 2);  // b kept as it was, a released, c pinned, b named twice
  EXPECT_EQ(registered().size(), 2u);
  const auto kept = std::count_if(first.begin(), first.end(), [](const auto& kv) { return registered().count(kv.first) > 0; });
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(pins.set({}), 0);
  EXPECT_TRUE(registered().empty());
}

TEST_F(HostPinsTest, AnotherDescriptorOfThePinnedFileTakesItsMappingWithItsBytes) {
  HostPins pins({fake_add, fake_remove});
  const int a = image("the model's bytes");
  EXPECT_EQ(pins.set({a}), 1);
  const int again = ::open(("/proc/self/fd/" + std::to_string(a)).c_str(), O_RDONLY | O_CLOEXEC);  // as a handover's load does
  ASSERT_GE(again, 0);
  fds.push_back(again);
  const int other = image("the model's bytes");  // equal bytes, another file
  EXPECT_FALSE(pins.take(other).has_value());
  std::optional<PinnedFile> f = pins.take(again);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(pins.size(), 0u);
  ASSERT_EQ(f->size, std::strlen("the model's bytes"));
  EXPECT_EQ(std::memcmp(f->data, "the model's bytes", f->size), 0);
  EXPECT_EQ(registered().count(f->data), 1u);  // still pinned: the caller's now
  pins.release(*f);
  EXPECT_TRUE(registered().empty());
}

TEST_F(HostPinsTest, KeepOnlyReleasesTheOthersAndWhatCannotBePinnedIsLeftOut) {
  HostPins pins({fake_add, fake_remove});
  const int a = image("aaaa"), b = image("bbbbbb");
  const int empty = ::memfd_create("empty", MFD_CLOEXEC);
  fds.push_back(empty);
  EXPECT_EQ(pins.set({a, empty, b}), 2);  // nothing to map in an empty file
  pins.keep_only(b);
  EXPECT_EQ(pins.size(), 1u);
  ASSERT_EQ(registered().size(), 1u);
  EXPECT_EQ(registered().begin()->second, 6u);
  pins.keep_only(-1);
  EXPECT_TRUE(registered().empty());

  HostPins refusing({refuse_add, fake_remove});
  EXPECT_EQ(refusing.set({a, b}), 0);
  HostPins none({});
  EXPECT_EQ(none.set({a, b}), 0);
}

}  // namespace
}  // namespace uma
