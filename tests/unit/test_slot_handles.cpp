// The slot handles of dist/transport.hpp, on a transport that only records what it is asked
// to do: each handle operation reaches the transport in the right order, a handle that
// still holds its slot cannot be dropped or overwritten, and an interrupted wait keeps
// its receive. The MPI transports themselves are tested in test_host_transport_mpi.cpp.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "dist/transport.hpp"

namespace pf::dist {
namespace {

// Every slot is its own; the log is what the handles asked for, in order.
class RecordingTransport final : public Transport {
 public:
  std::vector<std::string> log;
  bool arrived = true;  // wait_recv's data

 private:
  int acquire_slot() override {
    log.push_back("acquire " + std::to_string(next_));
    buffers_.emplace_back(4, 0.0f);
    return next_++;
  }
  void release_slot(int slot) override { log.push_back("release " + std::to_string(slot)); }
  float* slot_data(int slot) override { return buffers_.at(slot).data(); }
  void start_recv(int slot, int floats, int tag) override {
    log.push_back("recv " + std::to_string(slot) + " " + std::to_string(floats) + " tag " + std::to_string(tag));
  }
  bool wait_recv(int slot, WaitInterrupt* interrupt) override {
    log.push_back("wait " + std::to_string(slot));
    return arrived || !interrupt || !interrupt->raised();
  }
  void cancel_recv(int slot) override { log.push_back("cancel " + std::to_string(slot)); }
  void start_send(int slot, int floats, int tag) override {
    log.push_back("send " + std::to_string(slot) + " " + std::to_string(floats) + " tag " + std::to_string(tag));
  }
  bool send_done(int slot) override {
    log.push_back("test " + std::to_string(slot));
    return false;
  }
  void finish_send(int slot) override { log.push_back("finish " + std::to_string(slot)); }

  int next_ = 0;
  std::vector<std::vector<float>> buffers_;
};

struct AlwaysRaised final : WaitInterrupt {
  bool raised() override { return true; }
};

using Log = std::vector<std::string>;

TEST(SlotHandles, ReceiveComputeSendCommitReachTheTransportInOrder) {
  RecordingTransport t;
  RecvTicket recv = t.post_recv(12, 7);
  EXPECT_TRUE(recv.held());
  EXPECT_EQ(recv.id(), 0);
  ReadySlot ready = recv.wait();
  EXPECT_FALSE(recv.held());  // the slot moved on
  EXPECT_EQ(ready.id(), 0);
  ready.data()[3] = 1.5f;
  SendTicket send = t.send(std::move(ready), 12, 8);
  EXPECT_FALSE(ready.held());
  EXPECT_FALSE(send.done());
  send.commit();
  EXPECT_FALSE(send.held());
  EXPECT_EQ(t.log,
            (Log{"acquire 0", "recv 0 12 tag 7", "wait 0", "send 0 12 tag 8", "test 0", "finish 0", "release 0"}));
}

TEST(SlotHandles, CancelAndReleaseGiveTheSlotBack) {
  RecordingTransport t;
  RecvTicket recv = t.post_recv(4, 1);
  recv.cancel();
  t.release(t.fresh());
  EXPECT_EQ(t.log, (Log{"acquire 0", "recv 0 4 tag 1", "cancel 0", "release 0", "acquire 1", "release 1"}));
}

TEST(SlotHandles, AnInterruptedWaitKeepsItsReceive) {
  RecordingTransport t;
  t.arrived = false;
  AlwaysRaised stop;
  RecvTicket recv = t.post_recv(4, 1);
  EXPECT_FALSE(recv.wait_unless(stop).has_value());
  ASSERT_TRUE(recv.held());
  t.arrived = true;
  auto ready = recv.wait_unless(stop);  // the data wins once it is there
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->id(), 0);
  t.release(std::move(*ready));
}

TEST(SlotHandles, MovingHandsTheSlotOver) {
  RecordingTransport t;
  SendTicket first = t.send(t.fresh(), 4, 0);
  SendTicket second = std::move(first);
  EXPECT_FALSE(first.held());
  EXPECT_EQ(second.id(), 0);
  second.commit();
}

TEST(SlotHandlesDeathTest, DroppingAnUncommittedSendAborts) {
  EXPECT_DEATH(
      {
        RecordingTransport t;
        SendTicket send = t.send(t.fresh(), 4, 0);
      },
      "send dropped without commit");
}

TEST(SlotHandlesDeathTest, DroppingAPostedReceiveAborts) {
  EXPECT_DEATH(
      {
        RecordingTransport t;
        RecvTicket recv = t.post_recv(4, 0);
      },
      "receive dropped while it may still be written into");
}

TEST(SlotHandlesDeathTest, DroppingAReadySlotAborts) {
  EXPECT_DEATH(
      {
        RecordingTransport t;
        ReadySlot slot = t.fresh();
      },
      "ready slot dropped, neither sent nor released");
}

TEST(SlotHandlesDeathTest, OverwritingAnUncommittedSendAborts) {
  EXPECT_DEATH(
      {
        RecordingTransport t;
        SendTicket send = t.send(t.fresh(), 4, 0);
        send = t.send(t.fresh(), 4, 1);
      },
      "send dropped without commit");
}

TEST(SlotHandlesDeathTest, ASlotSentThroughAnotherTransportAborts) {
  EXPECT_DEATH(
      {
        RecordingTransport mine;
        RecordingTransport other;
        SendTicket send = other.send(mine.fresh(), 4, 0);
      },
      "belongs to another transport");
}

TEST(SlotHandles, AnExceptionUnwindingPastAHeldTicketPropagates) {
  // The transport still owns the buffer; the exception, not an abort, says what went wrong.
  RecordingTransport t;
  EXPECT_THROW(
      {
        SendTicket send = t.send(t.fresh(), 4, 0);
        throw std::runtime_error("compute failed");
      },
      std::runtime_error);
}

}  // namespace
}  // namespace pf::dist
