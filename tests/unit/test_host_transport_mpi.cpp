// HostTransport between two MPI ranks (run by ctest as `mpirun -n 2`): rank 0 sends, rank 1
// receives, as two neighbouring stages do. The end-to-end runs use ring depth 1 almost
// everywhere; here every depth the ring allows is driven with many micro-batches of
// varying lengths, each payload checked element by element against a formula; a receiver
// that holds back proves that no slot is handed out again before its send is committed;
// and a stop notice announced mid-stream interrupts a waiting receive.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>
#include <set>
#include <vector>

#include "dist/control_notices.hpp"
#include "dist/control_reports.hpp"
#include "dist/host_transport.hpp"
#include "dist/p2p.hpp"
#include "dist/wait.hpp"

namespace pf::dist {
namespace {

constexpr int kSender = 0, kReceiver = 1;
constexpr int kFloatsPerToken = 24;

int my_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// A communicator of its own per test, so that no message of one test can match another's.
struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  Comm() { MPI_Comm_dup(MPI_COMM_WORLD, &comm); }
  ~Comm() { MPI_Comm_free(&comm); }
};

// Float values that are exact integers (below 2^24) and differ between micro-batches and
// between positions, so a payload from the wrong micro-batch or a shifted one is caught.
float expected_value(long long micro_batch, int k) {
  return static_cast<float>((micro_batch * 7919 + k * 31 + 1) % 16000003);
}

void fill(float* data, long long micro_batch, int floats) {
  for (int k = 0; k < floats; ++k) data[k] = expected_value(micro_batch, k);
}

// Counts the elements that are not what micro-batch `micro_batch` sent (0 when intact).
int wrong_elements(const float* data, long long micro_batch, int floats) {
  int wrong = 0;
  for (int k = 0; k < floats; ++k) wrong += data[k] != expected_value(micro_batch, k);
  return wrong;
}

// Micro-batch lengths in tokens, 1..max_tokens, from a fixed LCG: short ones go eager,
// long ones (over Open MPI's 4 KiB shared-memory eager limit) by rendezvous.
std::vector<int> varying_lengths(int count, int max_tokens) {
  std::vector<int> lengths(count);
  unsigned state = 12345;
  for (int& length : lengths) {
    state = state * 1103515245u + 12345u;
    length = 1 + static_cast<int>((state >> 8) % static_cast<unsigned>(max_tokens));
  }
  return lengths;
}

// Micro-batch ids start just below the tag wrap (tag_of), so tags wrap mid-stream.
constexpr long long kFirstMicroBatch = 31900;

struct Stream {
  int depth;
  std::vector<int> lengths;  // tokens of each micro-batch
  int max_tokens() const { return *std::max_element(lengths.begin(), lengths.end()); }
};

// The next stage's side of the ring: `depth` receives posted ahead of the micro-batch it
// takes. Returns the number of distinct slots it used.
size_t receive_stream(HostTransport& transport, const Stream& s, ControlNotices& notice) {
  const long long count = static_cast<long long>(s.lengths.size());
  std::deque<RecvTicket> ahead;
  long long next_to_post = 0;
  std::set<int> slots;
  for (long long i = 0; i < count; ++i) {
    while (next_to_post < count && next_to_post < i + s.depth) {
      ahead.push_back(
          transport.post_recv(s.lengths[next_to_post] * kFloatsPerToken, tag_of(kFirstMicroBatch + next_to_post)));
      ++next_to_post;
    }
    EXPECT_LE(ahead.size(), static_cast<size_t>(s.depth));
    std::optional<ReadySlot> got = ahead.front().wait_unless(notice);  // no stop: never interrupted
    ahead.pop_front();
    if (!got) {
      ADD_FAILURE() << "a receive-wait was interrupted though no stop was announced";
      return slots.size();
    }
    slots.insert(got->id());
    EXPECT_EQ(wrong_elements(got->data(), kFirstMicroBatch + i, s.lengths[i] * kFloatsPerToken), 0)
        << "micro-batch " << i << " of " << s.lengths[i] << " tokens, ring depth " << s.depth;
    transport.release(std::move(*got));
  }
  return slots.size();
}

// The previous stage's side: at most `depth` sends in flight, finished ones committed
// early. Returns the number of distinct slots it used.
size_t send_stream(HostTransport& transport, const Stream& s) {
  std::deque<SendTicket> in_flight;
  std::set<int> slots;
  for (size_t i = 0; i < s.lengths.size(); ++i) {
    ReadySlot slot = transport.fresh();
    for (const SendTicket& send : in_flight)
      EXPECT_NE(slot.id(), send.id()) << "a fresh slot aliases a send not yet committed";
    slots.insert(slot.id());
    const int floats = s.lengths[i] * kFloatsPerToken;
    fill(slot.data(), kFirstMicroBatch + i, floats);
    in_flight.push_back(transport.send(std::move(slot), floats, tag_of(kFirstMicroBatch + i)));
    while (!in_flight.empty() && (in_flight.size() > static_cast<size_t>(s.depth) || in_flight.front().done())) {
      in_flight.front().commit();
      in_flight.pop_front();
    }
  }
  for (SendTicket& send : in_flight) send.commit();
  return slots.size();
}

class RingDepth : public testing::TestWithParam<int> {};

TEST_P(RingDepth, EveryPayloadArrivesIntactAndTheRingStaysWithinItsDepth) {
  const Stream stream{GetParam(), varying_lengths(300, 160)};
  Comm link, control;
  ControlNotices notice(control.comm);  // posted and never raised: the receive-waits watch it
  HostTransport transport(static_cast<size_t>(stream.max_tokens()) * kFloatsPerToken, kSender, kReceiver, link.comm);
  if (my_rank() == kSender) {
    // `depth` in flight plus the one being filled: never more slots than that.
    EXPECT_LE(send_stream(transport, stream), static_cast<size_t>(stream.depth) + 1);
  } else {
    // Every slot is posted ahead before the first is taken: exactly `depth` of them.
    EXPECT_EQ(receive_stream(transport, stream, notice), static_cast<size_t>(stream.depth));
  }
  MPI_Barrier(link.comm);
}

INSTANTIATE_TEST_SUITE_P(HostTransport, RingDepth, testing::Values(1, 2, 4, 8));

// The receiver holds back while the sender keeps producing, so sends stay in flight; the
// sender then reuses the slots of the sends it has committed and writes new payloads into
// them while the other sends are still waiting for their receives. A slot handed out
// before its commit would overwrite a payload still on its way.
TEST(HostTransport, NoSlotIsReusedBeforeItsSendIsCommitted) {
  constexpr int kHeld = 12, kFloats = 16384;  // 64 KiB: rendezvous, nothing moves before the receive
  Comm link, sync;
  HostTransport transport(kFloats, kSender, kReceiver, link.comm);
  if (my_rank() == kSender) {
    std::vector<SendTicket> held;
    std::set<const float*> held_buffers;
    for (int m = 0; m < kHeld; ++m) {
      ReadySlot slot = transport.fresh();
      for (const SendTicket& send : held) ASSERT_NE(slot.id(), send.id());
      ASSERT_EQ(held_buffers.count(slot.data()), 0u) << "a fresh buffer aliases one still being sent";
      fill(slot.data(), m, kFloats);
      held_buffers.insert(slot.data());
      held.push_back(transport.send(std::move(slot), kFloats, tag_of(m)));
    }
    // The premise: the receiver has posted nothing, so these sends cannot have finished.
    EXPECT_FALSE(std::all_of(held.begin(), held.end(), [](SendTicket& s) { return s.done(); }));
    MPI_Barrier(sync.comm);  // 1: the receiver may take the first half

    std::set<int> committed;
    for (int m = 0; m < kHeld / 2; ++m) {
      committed.insert(held[m].id());
      held[m].commit();
    }
    for (int m = kHeld; m < kHeld + kHeld / 2; ++m) {
      ReadySlot slot = transport.fresh();
      EXPECT_EQ(committed.count(slot.id()), 1u) << "slot " << slot.id() << " was not committed";
      for (int k = kHeld / 2; k < kHeld; ++k) ASSERT_NE(slot.id(), held[k].id());
      fill(slot.data(), m, kFloats);  // would overwrite a payload still in flight if it aliased one
      held.push_back(transport.send(std::move(slot), kFloats, tag_of(m)));
    }
    MPI_Barrier(sync.comm);  // 2: the receiver may take the rest
    for (size_t m = kHeld / 2; m < held.size(); ++m) held[m].commit();
  } else {
    MPI_Barrier(sync.comm);  // 1
    for (int m = 0; m < kHeld / 2; ++m) {
      ReadySlot got = transport.post_recv(kFloats, tag_of(m)).wait();
      EXPECT_EQ(wrong_elements(got.data(), m, kFloats), 0) << "micro-batch " << m;
      transport.release(std::move(got));
    }
    MPI_Barrier(sync.comm);  // 2
    for (int m = kHeld / 2; m < kHeld + kHeld / 2; ++m) {
      ReadySlot got = transport.post_recv(kFloats, tag_of(m)).wait();
      EXPECT_EQ(wrong_elements(got.data(), m, kFloats), 0) << "micro-batch " << m;
      transport.release(std::move(got));
    }
  }
}

// Rank 0 sends micro-batches [0, kCutoff) and then announces the cutoff, while rank 1 waits
// for micro-batch kCutoff with `depth` receives posted: the wait must return (interrupted),
// the receives past the cutoff are cancelled, and a later message with the tag of a
// cancelled receive still reaches a new receive intact (the cancelled one took nothing).
TEST(ControlNotices, ACutoffInterruptsAWaitingReceiveAndCancelsThoseBeyondIt) {
  constexpr int kPlanned = 20, kCutoff = 7, kDepth = 4, kTokens = 50;
  const int floats = kTokens * kFloatsPerToken;
  Comm link, control, handshake;
  ControlNotices notice(control.comm);
  HostTransport transport(floats, kSender, kReceiver, link.comm);
  constexpr long long kLate = 1000;  // the payload of the message sent after the stop
  if (my_rank() == kSender) {
    for (int m = 0; m < kCutoff; ++m) {
      ReadySlot slot = transport.fresh();
      fill(slot.data(), m, floats);
      transport.send(std::move(slot), floats, tag_of(m)).commit();
    }
    int waiting = 0;  // rank 1 is about to wait for micro-batch kCutoff
    MPI_Recv(&waiting, 1, MPI_INT, kReceiver, 0, handshake.comm, MPI_STATUS_IGNORE);
    notice.announce(kCutoff);
    EXPECT_FALSE(notice.take().has_value());  // the announcer hears nothing
    MPI_Barrier(handshake.comm);              // the receives past the cutoff are cancelled
    ReadySlot late = transport.fresh();
    fill(late.data(), kLate, floats);
    transport.send(std::move(late), floats, tag_of(kCutoff)).commit();
    return;
  }
  long long count = kPlanned;
  std::deque<RecvTicket> ahead;
  long long next_to_post = 0;
  std::set<int> cancelled_slots;
  bool interrupted = false;
  int received = 0;
  auto apply_cutoff = [&](long long cutoff) {
    count = std::min(count, cutoff);
    while (!ahead.empty() && next_to_post - 1 >= count) {
      cancelled_slots.insert(ahead.back().id());
      ahead.back().cancel();
      ahead.pop_back();
      --next_to_post;
    }
  };
  for (long long i = 0; i < count; ++i) {
    EXPECT_FALSE(notice.take().has_value()) << "the notice came before rank 1 said it was waiting";
    while (next_to_post < count && next_to_post < i + kDepth) {
      ahead.push_back(transport.post_recv(floats, tag_of(next_to_post)));
      ++next_to_post;
    }
    if (i == kCutoff) {
      const int waiting = 1;
      MPI_Send(&waiting, 1, MPI_INT, kSender, 0, handshake.comm);
    }
    std::optional<ReadySlot> got = ahead.front().wait_unless(notice);
    if (!got) {
      interrupted = true;
      const std::optional<long long> cutoff = notice.take();
      ASSERT_TRUE(cutoff.has_value());
      EXPECT_EQ(*cutoff, kCutoff);
      EXPECT_FALSE(notice.raised());  // taken: it interrupts nothing more
      apply_cutoff(*cutoff);
      if (i >= count) break;
      got = ahead.front().wait();
    }
    ahead.pop_front();
    EXPECT_EQ(wrong_elements(got->data(), i, floats), 0) << "micro-batch " << i;
    ++received;
    transport.release(std::move(*got));
  }
  EXPECT_TRUE(interrupted);
  EXPECT_EQ(received, kCutoff);
  EXPECT_TRUE(ahead.empty());
  EXPECT_EQ(cancelled_slots.size(), static_cast<size_t>(kDepth));  // [kCutoff, kCutoff + depth) were posted
  MPI_Barrier(handshake.comm);
  RecvTicket late = transport.post_recv(floats, tag_of(kCutoff));
  EXPECT_EQ(cancelled_slots.count(late.id()), 1u) << "the cancelled slots went back to the pool";
  ReadySlot got = late.wait();
  EXPECT_EQ(wrong_elements(got.data(), kLate, floats), 0);
  transport.release(std::move(got));
}

// Checkpoint calls and the stop travel as one ordered stream: when the stop is seen, every
// call announced before it is already waiting, in order, with its values; the reports go
// the other way and reach rank 0 with their sender.
TEST(ControlNotices, CheckpointCallsArriveInOrderBeforeTheStop) {
  Comm control;
  ControlNotices notice(control.comm);
  ControlReports reports(control.comm);
  if (my_rank() == kSender) {
    for (long long k = 1; k <= 3; ++k) notice.announce_checkpoint({k, 10 * k, 7, 100 * k});
    notice.announce(42, 3);
    EXPECT_THROW(notice.announce_checkpoint({4, 50, 7, 400}), std::logic_error);  // nothing after the stop
    EXPECT_THROW(notice.announce_end(3), std::logic_error);
    std::vector<std::pair<int, std::string>> got;
    wait_until([&] {
      for (auto& report : reports.arrived()) got.push_back(report);
      return got.size() >= 2;
    });
    EXPECT_EQ(got[0], std::make_pair(kReceiver, std::string("first")));
    EXPECT_EQ(got[1], std::make_pair(kReceiver, std::string("second")));
  } else if (my_rank() == kReceiver) {
    wait_until([&] { return notice.raised(); });
    EXPECT_EQ(notice.last_call(), std::optional<long long>(3));  // the stop names the last call
    for (long long k = 1; k <= 3; ++k) {
      const std::optional<CheckpointCall> call = notice.take_checkpoint();
      ASSERT_TRUE(call.has_value()) << "call " << k << " had not arrived when the stop had";
      EXPECT_EQ(call->sequence, k);
      EXPECT_EQ(call->cutoff, 10 * k);
      EXPECT_EQ(call->prompt, 7);
      EXPECT_EQ(call->tokens, 100 * k);
    }
    EXPECT_FALSE(notice.take_checkpoint().has_value());
    EXPECT_EQ(notice.take(), std::optional<long long>(42));
    reports.send("first");
    reports.send("second");
  }
  MPI_Barrier(control.comm);
}

// The end (no stop) is the last notice too: it names the last call and interrupts nothing.
TEST(ControlNotices, TheEndNamesTheLastCallAndStopsNothing) {
  Comm control;
  ControlNotices notice(control.comm);
  if (my_rank() == kSender) {
    notice.announce_checkpoint({1, 5, 0, 80});
    notice.announce_end(1);
    EXPECT_FALSE(notice.announced());  // no stop was announced
  } else if (my_rank() == kReceiver) {
    wait_until([&] { return notice.last_call().has_value(); });
    EXPECT_EQ(*notice.last_call(), 1);
    EXPECT_FALSE(notice.raised());
    EXPECT_FALSE(notice.take().has_value());
    ASSERT_TRUE(notice.take_checkpoint().has_value());
  }
  MPI_Barrier(control.comm);
}

}  // namespace
}  // namespace pf::dist

namespace {

// A fatal assertion returns from one rank's test body while its peer goes on to a plain
// MPI_Barrier, which no watchdog covers: end the job at once instead of at ctest's timeout.
class AbortOnFatalFailure : public testing::EmptyTestEventListener {
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.fatally_failed()) return;
    std::fprintf(stderr, "%s:%d: fatal test failure, aborting the job\n", result.file_name(), result.line_number());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
};

}  // namespace

// Every rank runs every test (they talk to each other); the job fails if any rank fails.
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest::GetInstance()->listeners().Append(new AbortOnFatalFailure);
  pf::dist::set_watchdog_timeout(60);  // a lost message aborts the job instead of hanging it
  int failed = RUN_ALL_TESTS() != 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
