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
  ASSERT_EQ(::send(p.fds[0], "--model\0x", 9, 0), 9);
  EXPECT_EQ(receive_handover(p.fds[1], &got, &closed).code(), ErrorCode::kInvalidArgument);
  ASSERT_EQ(::send(p.fds[0], "--model", 7, 0), 7);
  EXPECT_EQ(receive_handover(p.fds[1], &got, &closed).code(), ErrorCode::kInvalidArgument);
  for (int fd : {log[0], log[1]}) ::close(fd);
}

}  // namespace
}  // namespace uma::agent
