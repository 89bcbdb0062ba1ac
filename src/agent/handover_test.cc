#include "agent/handover.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace uma::agent {
namespace {

struct Pair {
  int fds[2] = {-1, -1};
  Pair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0); }
  ~Pair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

// A handover's message (a pin set fails the test).
Status receive_handover(int fd, Handover* out, bool* closed) {
  StandbyMessage m;
  Status s = receive_standby_message(fd, &m, closed);
  EXPECT_FALSE(m.is_pin_set);
  *out = m.handover;
  return s;
}

ino_t inode(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return st.st_ino;
}

TEST(Handover, TheCommandLineAndBothDescriptorsArriveAsSent) {
  Pair p;
  int log[2];
  ASSERT_EQ(::pipe(log), 0);
  const int image = ::memfd_create("image", MFD_CLOEXEC);
  ASSERT_GE(image, 0);
  Handover h;
  h.args = {"--model", "/proc/self/fd/3", "an argument with spaces", "", "--status-fd", "4"};
  h.log_fd = log[1];
  h.image_fd = image;
  ASSERT_TRUE(send_handover(p.fds[0], h).ok());
  Handover got;
  bool closed = true;
  ASSERT_TRUE(receive_handover(p.fds[1], &got, &closed).ok());
  EXPECT_FALSE(closed);
  EXPECT_EQ(got.args, h.args);
  ASSERT_GE(got.log_fd, 0);
  ASSERT_GE(got.image_fd, 0);
  EXPECT_EQ(inode(got.log_fd), inode(log[1]));
  EXPECT_EQ(inode(got.image_fd), inode(image));
  EXPECT_EQ(::write(got.log_fd, "x", 1), 1);  // the same pipe: what the receiver writes, the log holds
  char c = 0;
  EXPECT_EQ(::read(log[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  for (int fd : {got.log_fd, got.image_fd, log[0], log[1], image}) ::close(fd);
}

TEST(Handover, WithoutAnImageOnlyTheLogArrives) {
  Pair p;
  int log[2];
  ASSERT_EQ(::pipe(log), 0);
  ASSERT_TRUE(send_handover(p.fds[0], {{"--model", "x.gguf"}, log[1], -1}).ok());
  Handover got;
  bool closed = true;
  ASSERT_TRUE(receive_handover(p.fds[1], &got, &closed).ok());
  EXPECT_EQ(got.args, (std::vector<std::string>{"--model", "x.gguf"}));
  EXPECT_EQ(got.image_fd, -1);
  for (int fd : {got.log_fd, log[0], log[1]}) ::close(fd);
}

TEST(Handover, APeerThatClosesWithoutSendingIsNotAnError) {
  Pair p;
  ::close(p.fds[0]);
  p.fds[0] = -1;
  Handover got;
  bool closed = false;
  EXPECT_TRUE(receive_handover(p.fds[1], &got, &closed).ok());
  EXPECT_TRUE(closed);
}

TEST(Handover, WhatCannotBeAHandoverIsRefusedOnBothSides) {
  Pair p;
  int log[2];
  ASSERT_EQ(::pipe(log), 0);
  EXPECT_EQ(send_handover(p.fds[0], {{std::string("a\0b", 3)}, log[1], -1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(send_handover(p.fds[0], {{"--model", "x"}, -1, -1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(send_handover(p.fds[0], {{std::string(kHandoverMaxBytes, 'a')}, log[1], -1}).code(), ErrorCode::kInvalidArgument);
  // A message without descriptors, and one whose last argument has no end.
  Handover got;
  bool closed = false;
  ASSERT_EQ(::send(p.fds[0], "H--model\0x", 10, 0), 10);
  EXPECT_EQ(receive_handover(p.fds[1], &got, &closed).code(), ErrorCode::kInvalidArgument);
  ASSERT_EQ(::send(p.fds[0], "--model", 7, 0), 7);  // no kind
  EXPECT_EQ(receive_handover(p.fds[1], &got, &closed).code(), ErrorCode::kInvalidArgument);
  ASSERT_EQ(::send(p.fds[0], "Px", 2, 0), 2);  // a pin set with bytes
  StandbyMessage m;
  EXPECT_EQ(receive_standby_message(p.fds[1], &m, &closed).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(send_pin_set(p.fds[0], std::vector<int>(kMaxPinnedImages + 1, log[0])).code(), ErrorCode::kInvalidArgument);
  for (int fd : {log[0], log[1]}) ::close(fd);
}

TEST(Handover, PinSetsArriveBeforeTheHandoverWithTheirImages) {
  Pair p;
  int images[3];
  for (int& fd : images) {
    fd = ::memfd_create("image", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
  }
  ASSERT_TRUE(send_pin_set(p.fds[0], {images[0], images[1]}).ok());
  ASSERT_TRUE(send_pin_set(p.fds[0], {}).ok());  // every pin released
  int log[2];
  ASSERT_EQ(::pipe(log), 0);
  ASSERT_TRUE(send_handover(p.fds[0], {{"--model", "/proc/self/fd/3"}, log[1], images[2]}).ok());
  bool closed = true;
  StandbyMessage first, second, third;
  ASSERT_TRUE(receive_standby_message(p.fds[1], &first, &closed).ok());
  EXPECT_FALSE(closed);
  ASSERT_TRUE(first.is_pin_set);
  ASSERT_EQ(first.images.size(), 2u);
  EXPECT_EQ(inode(first.images[0]), inode(images[0]));
  EXPECT_EQ(inode(first.images[1]), inode(images[1]));
  ASSERT_TRUE(receive_standby_message(p.fds[1], &second, &closed).ok());
  EXPECT_TRUE(second.is_pin_set);
  EXPECT_TRUE(second.images.empty());
  ASSERT_TRUE(receive_standby_message(p.fds[1], &third, &closed).ok());
  EXPECT_FALSE(third.is_pin_set);
  EXPECT_EQ(third.handover.args, (std::vector<std::string>{"--model", "/proc/self/fd/3"}));
  EXPECT_EQ(inode(third.handover.image_fd), inode(images[2]));
  for (int fd : first.images) ::close(fd);
  for (int fd : {third.handover.log_fd, third.handover.image_fd, log[0], log[1], images[0], images[1], images[2]}) ::close(fd);
}

}  // namespace
}  // namespace uma::agent
