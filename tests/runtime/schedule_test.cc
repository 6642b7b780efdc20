// Schedules: shape of the action lists, and a blocking-receive replay that proves every (S, M)
// combination completes (no deadlock) with matching per-link FIFO order.
#include "runtime/exec/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "runtime/exec/executor.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/ranks.h"

namespace slowpipe::runtime {
namespace {

TEST(ScheduleTest, GpipeIsAllForwardsThenReverseBackwards) {
  EXPECT_EQ(describe(computeOnly(gpipeSchedule(4, 3, 1))), "F0 F1 F2 B2 B1 B0 N S");
}

TEST(ScheduleTest, OneFOneBWarmsUpByDistanceToTheEnd) {
  EXPECT_EQ(describe(computeOnly(oneFOneBSchedule(4, 6, 0))),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 N S");
  EXPECT_EQ(describe(computeOnly(oneFOneBSchedule(4, 6, 3))),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 N S");
  EXPECT_EQ(describe(computeOnly(oneFOneBSchedule(4, 2, 0))), "F0 F1 B0 B1 N S");
}

// Communication is part of the list: what the worker executes and the simulator replays.
TEST(ScheduleTest, CommunicationIsExplicit) {
  EXPECT_EQ(describe(gpipeSchedule(2, 2, 0)), "F0 sA0 F1 sA1 rG1 B1 rG0 B0 N rP sT S");
  EXPECT_EQ(describe(gpipeSchedule(2, 2, 1)), "rA0 F0 rA1 F1 B1 sG1 B0 sG0 N sP rT S");
  EXPECT_EQ(describe(gpipeSchedule(3, 1, 1)), "rA0 F0 sA0 rG0 B0 sG0 N rP sP rT sT S");
  EXPECT_EQ(describe(gpipeSchedule(1, 2, 0)), "F0 F1 B1 B0 N S");  // one stage: nothing to move
}

TEST(ScheduleTest, UnknownNameListsValidOnes) {
  try {
    makeSchedule("zigzag", 2, 2, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpipe, 1f1b"), std::string::npos);
  }
}

// Replays the schedules on the executor (runtime/exec/executor.h) with a backend of message queues:
// sends are asynchronous, a receive stays pending until its message is queued. Returns true if
// every stage finishes and every receive found the message it expected. Peers and message keys
// are the protocol's, as the executor passes them on. With one model chunk per stage every
// receive must be the head of its link's FIFO (one queue per directed link, shared by every
// message kind); with chunks the transport takes messages by key, so any queued one will do.
class QueueBackend : public Backend {
 public:
  QueueBackend(int ranks, bool keyed) : ranks_(ranks), keyed_(keyed) {}
  using Key = std::tuple<Action::Message, int, int>;  // message, micro-batch or shard, chunk
  double now() override { return 0; }
  Progress compute(const Action&, const ActionContext&) override { return Progress::kDone; }
  Progress step(const Action&, const ActionContext&) override { return Progress::kDone; }
  Progress dpBegin(const Action&, const ActionContext&) override { return Progress::kDone; }
  Progress dpEnd(const Action&, const ActionContext&) override { return Progress::kDone; }
  Progress outerStep(const Action&, const ActionContext&) override { return Progress::kDone; }
  Progress send(const Action& a, const ActionContext& c) override {
    if (validPeer(c)) links_[{c.rank, c.peer}].push_back(keyOf(a, c));
    return Progress::kDone;
  }
  Progress recv(const Action& a, const ActionContext& c) override {
    return take(a, c) ? Progress::kDone : Progress::kPending;
  }
  static Key keyOf(const Action& a, const ActionContext& c) {
    return Key{a.message, protocol::keySlot(a), c.chunk};
  }
  // Takes the message a receive waits for, if it is queued.
  bool take(const Action& a, const ActionContext& c) {
    if (!validPeer(c)) return true;
    auto& q = links_[{c.peer, c.rank}];
    const Key key = keyOf(a, c);
    const auto it =
        !keyed_ ? (q.empty() ? q.end() : q.begin()) : std::find(q.begin(), q.end(), key);
    if (it == q.end()) return false;  // not there yet
    bad_ |= *it != key;
    q.erase(it);
    return true;
  }
  bool clean() const {
    for (const auto& [link, q] : links_)
      if (!q.empty()) return false;  // a message nobody received
    return !bad_;
  }

 private:
  bool validPeer(const ActionContext& c) {
    const bool ok = c.peer >= 0 && c.peer < ranks_ && c.peer != c.rank;
    bad_ |= !ok;
    return ok;
  }
  int ranks_;
  bool keyed_, bad_ = false;
  std::map<std::pair<int, int>, std::deque<Key>> links_;  // (from, to) -> in flight
};

bool replayPlans(const std::vector<std::vector<Action>>& plans, int S, int chunks);

bool replay(const std::string& name, int S, int M, int chunks = 1) {
  std::vector<std::vector<Action>> plans;
  for (int s = 0; s < S; ++s) plans.push_back(makeSchedule(name, S, M, s, chunks));
  return replayPlans(plans, S, chunks);
}

bool replayPlans(const std::vector<std::vector<Action>>& plans, int S, int chunks) {
  const RankLayout layout{S, 1, chunks};
  QueueBackend b(S, chunks > 1);
  std::vector<StepExecutor> ex;
  for (int s = 0; s < S; ++s) {
    ex.emplace_back(layout, s);
    ex.back().start(plans[s], {}, 0, false);
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      const size_t before = ex[s].position();
      if (ex[s].pending()) {
        if (!b.take(ex[s].current(), ex[s].context())) continue;
        ex[s].finish(b);
      }
      if (!ex[s].ended()) ex[s].run(b);
      progress |= ex[s].position() != before;
    }
  }
  for (int s = 0; s < S; ++s)
    if (!ex[s].ended()) return false;
  return b.clean();
}

// The replay can fail: messages out of a link's order, a receive before the send it waits for
// (deadlock), a message nobody receives.
TEST(ExecutorTest, ReplayFindsDisorderDeadlocksAndLostMessages) {
  // "F0 sA0 F1 sA1 rG1 B1 rG0 B0 N rP sT S" and "rA0 F0 rA1 F1 B1 sG1 B0 sG0 N sP rT S"
  const std::vector<std::vector<Action>> good = {gpipeSchedule(2, 2, 0), gpipeSchedule(2, 2, 1)};
  ASSERT_TRUE(replayPlans(good, 2, 1));
  auto disorder = good;
  std::swap(disorder[0][1], disorder[0][3]);  // sA1 before sA0
  EXPECT_FALSE(replayPlans(disorder, 2, 1));
  auto deadlock = good;
  std::rotate(deadlock[0].begin() + 1, deadlock[0].begin() + 4,
              deadlock[0].begin() + 5);  // F0 rG1 sA0 ...
  ASSERT_EQ(describe(deadlock[0]).substr(0, 9), "F0 rG1 sA");
  EXPECT_FALSE(replayPlans(deadlock, 2, 1));
  auto lost = good;
  lost[1].erase(lost[1].end() - 2);  // stage 1 never receives the norm total
  EXPECT_FALSE(replayPlans(lost, 2, 1));
}

// A backend may leave an action pending: the executor resumes it where it stopped, an event spans
// the action from its dispatch to its finish, the DP actions' time is summed, and each action
// comes with the protocol's peer rank and chunk.
TEST(ExecutorTest, PendingActionsResumeWithTheirContext) {
  struct Clocked : Backend {
    double t = 0;
    std::vector<std::pair<Action, ActionContext>> seen;
    double now() override { return t; }
    Progress log(const Action& a, const ActionContext& c, Progress p) {
      seen.push_back({a, c});
      return p;
    }
    Progress compute(const Action& a, const ActionContext& c) override {
      return log(a, c, Progress::kPending);
    }
    Progress step(const Action& a, const ActionContext& c) override {
      return log(a, c, Progress::kDone);
    }
    Progress send(const Action& a, const ActionContext& c) override {
      return log(a, c, Progress::kDone);
    }
    Progress recv(const Action& a, const ActionContext& c) override {
      return log(a, c, Progress::kDone);
    }
    Progress dpBegin(const Action& a, const ActionContext& c) override {
      return log(a, c, Progress::kPending);
    }
    Progress dpEnd(const Action& a, const ActionContext& c) override {
      return log(a, c, Progress::kDone);
    }
    Progress outerStep(const Action& a, const ActionContext& c) override {
      return log(a, c, Progress::kDone);
    }
  } b;
  const RankLayout layout{2, 2, 1};  // rank 1: stage 0, replica 1
  DpShape dp;
  dp.replicas = 2;
  const auto list = makeSchedule("gpipe", 2, 1, 0, dp, 1, 0);
  ASSERT_EQ(describe(list), "F0 sA0 rG0 B0 D<0 sRS1@0 rRS0@0 sAG0@0 rAG1@0 D>0 N rP sT S");
  StepExecutor ex(layout, 1);
  ActionContext where;
  where.step = 7;
  ex.start(list, where, b.t, true);
  int pendings = 0;
  while (!ex.run(b)) {  // every compute takes 1 s, DpBegin 0.5 s
    ++pendings;
    ASSERT_TRUE(ex.pending());
    b.t += ex.current().kind == Action::Kind::kDpBegin ? 0.5 : 1.0;
    ex.finish(b);
  }
  EXPECT_EQ(pendings, 4);  // F0, B0, DpBegin, GradNorm
  EXPECT_DOUBLE_EQ(b.t, 3.5);
  ASSERT_EQ(ex.events().size(), list.size());
  EXPECT_EQ(ex.events()[0].start, 0.0);
  EXPECT_EQ(ex.events()[0].end, 1.0);
  EXPECT_EQ(ex.events()[0].step, 7);
  EXPECT_DOUBLE_EQ(ex.dpSeconds(), 0.5);
  ASSERT_EQ(b.seen.size(), list.size());
  for (const auto& [a, c] : b.seen) {
    EXPECT_EQ(c.rank, 1);
    EXPECT_EQ(c.step, 7);
    if (a.isCommunication()) EXPECT_EQ(c.peer, protocol::peerRank(layout, 1, a)) << describe({a});
  }
  EXPECT_EQ(b.seen[1].second.peer, 3);  // sA0: stage 1, replica 1
  EXPECT_EQ(b.seen[5].second.peer, 0);  // sRS1@0: replica 0 of stage 0
}

TEST(ScheduleTest, EveryShapeCompletesWithFifoOrder) {
  for (const auto& info : schedules())
    for (int S = 1; S <= 6; ++S)
      for (int M = 1; M <= 8; ++M) {
        ASSERT_TRUE(replay(info.name, S, M)) << info.name << " S=" << S << " M=" << M;
        int f = 0, b = 0, in = 0, w = 0;
        for (const auto& a : makeSchedule(info.name, S, M, S / 2)) {
          f += a.kind == Action::Kind::kForward;
          b += a.kind == Action::Kind::kBackward;
          in += a.kind == Action::Kind::kBackwardInput;
          w += a.kind == Action::Kind::kBackwardWeight;
        }
        ASSERT_EQ(f, M);
        ASSERT_EQ(b, info.splitsBackward ? 0 : M) << info.name;
        ASSERT_EQ(in, info.splitsBackward ? M : 0) << info.name;
        ASSERT_EQ(w, in) << info.name;
      }
}

// Zero-bubble H1: 1F1B's order of forwards and input-gradient passes; stage s defers up to s
// weight-gradient passes and runs the rest at the end (Qi et al. 2023, the handcrafted H1).
TEST(ScheduleTest, ZbH1DefersWeightGradientsByStage) {
  EXPECT_EQ(describe(computeOnly(makeSchedule("zb_h1", 4, 6, 0))),
            "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 I3 W3 I4 W4 I5 W5 N S");
  EXPECT_EQ(describe(computeOnly(makeSchedule("zb_h1", 4, 6, 3))),
            "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 W3 W4 W5 N S");
  EXPECT_EQ(describe(makeSchedule("zb_h1", 2, 2, 1)),
            "rA0 F0 I0 sG0 rA1 F1 I1 sG1 W0 W1 N sP rT S");
  // The messages and their order on every link are 1F1B's: only local compute moved.
  for (int S = 1; S <= 6; ++S)
    for (int M = 1; M <= 8; ++M)
      for (int s = 0; s < S; ++s) {
        std::vector<Action> zb, ref;
        for (const auto& a : makeSchedule("zb_h1", S, M, s))
          if (a.isCommunication()) zb.push_back(a);
        for (const auto& a : makeSchedule("1f1b", S, M, s))
          if (a.isCommunication()) ref.push_back(a);
        ASSERT_EQ(describe(zb), describe(ref)) << "S=" << S << " M=" << M << " s=" << s;
      }
}

// Interleaved 1F1B (Megatron-LM): micro-batches in rounds of S, chunk by chunk; stage s warms up
// with 2 (S - 1 - s) + (V - 1) S forwards.
TEST(ScheduleTest, InterleavedOneFOneBRunsChunksRoundRobin) {
  EXPECT_EQ(describe(computeOnly(makeSchedule("interleaved_1f1b", 2, 4, 0, 2))),
            "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3 N S");
  EXPECT_EQ(describe(computeOnly(makeSchedule("interleaved_1f1b", 2, 4, 1, 2))),
            "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3 N S");
  // Chunk 1 of stage 0 takes its input from the last stage (the ring) and chunk 0 of stage 0
  // sends no gradient: it is the first virtual stage.
  EXPECT_EQ(describe(makeSchedule("interleaved_1f1b", 2, 2, 0, 2)),
            "F0 sA0 F1 sA1 rA0.1 F0.1 sA0.1 rA1.1 F1.1 sA1.1 rG0.1 B0.1 sG0.1 rG1.1 B1.1 sG1.1 rG0 "
            "B0 rG1 B1 N rP sT S");
  const RankLayout ring{2, 1, 2};
  Action wrap{Action::Kind::kRecv, 0, Action::Peer::kPrev, Action::Message::kActivation};
  wrap.chunk = 1;
  EXPECT_EQ(protocol::peerRank(ring, 0, wrap), 1);
  EXPECT_EQ(protocol::boundaryChunk(ring, 0, wrap), 0);  // boundary 1 (virtual stage 1 -> 2)
  for (int S = 2; S <= 6; ++S)
    for (int V = 2; V <= 4; ++V)
      for (int M = S; M <= 3 * S; M += S) {
        ASSERT_TRUE(replay("interleaved_1f1b", S, M, V)) << "S=" << S << " V=" << V << " M=" << M;
        for (int s = 0; s < S; ++s) {
          std::set<std::pair<int, int>> f, b;
          for (const auto& a : makeSchedule("interleaved_1f1b", S, M, s, V)) {
            if (a.kind == Action::Kind::kForward) {
              ASSERT_TRUE(f.insert({a.chunk, a.microBatch}).second);
            }
            if (a.kind == Action::Kind::kBackward) {
              ASSERT_TRUE(b.insert({a.chunk, a.microBatch}).second);
            }
          }
          ASSERT_EQ(f.size(), static_cast<size_t>(M * V));
          ASSERT_EQ(b, f);
        }
      }
  // One chunk per stage is a schedule of its own (and completes in FIFO order).
  for (int S = 1; S <= 4; ++S) ASSERT_TRUE(replay("interleaved_1f1b", S, 5, 1)) << S;
  EXPECT_THROW(makeSchedule("1f1b", 2, 4, 0, 2), std::invalid_argument);  // 1f1b runs one chunk
}

// Evaluation is an action list too: each batch through every virtual stage, then the barrier
// from the last stage back; it completes for every shape.
TEST(ScheduleTest, EvaluationIsAnActionList) {
  EXPECT_EQ(describe(evalSchedule(2, 3, 0)), "E0 sE0 E1 sE1 E2 sE2 rX");
  EXPECT_EQ(describe(evalSchedule(2, 3, 1)), "rE0 E0 rE1 E1 rE2 E2 sX");
  EXPECT_EQ(describe(evalSchedule(3, 1, 1)), "rE0 E0 sE0 rX sX");
  EXPECT_EQ(describe(evalSchedule(2, 1, 0, 2)), "E0 sE0 rE0.1 E0.1 sE0.1 rX");
  EXPECT_EQ(describe(evalSchedule(1, 2, 0)), "E0 E1");
  for (int S = 1; S <= 5; ++S)
    for (int V = 1; V <= (S > 1 ? 3 : 1); ++V)
      for (int B = 0; B <= 4; ++B) {
        std::vector<std::vector<Action>> plans;
        for (int s = 0; s < S; ++s) plans.push_back(evalSchedule(S, B, s, V));
        ASSERT_TRUE(replayPlans(plans, S, V)) << "S=" << S << " V=" << V << " B=" << B;
      }
}

// Memory: a micro-batch's activations live from its forward until its backward ends (for a split
// one: its W). 1F1B holds at most S-s on stage s; zb_h1 at most S on every stage, 1F1B's peak; and
// every W follows its own BackwardInput.
TEST(ScheduleTest, InFlightMicroBatchesStayWithinOneFOneBsPeak) {
  for (int S = 1; S <= 6; ++S)
    for (int M = 1; M <= 8; ++M)
      for (int s = 0; s < S; ++s)
        for (const char* name : {"1f1b", "zb_h1"}) {
          std::set<int> live, inputDone;
          size_t peak = 0;
          for (const auto& a : makeSchedule(name, S, M, s)) {
            if (a.kind == Action::Kind::kForward) live.insert(a.microBatch);
            if (a.kind == Action::Kind::kBackwardInput) inputDone.insert(a.microBatch);
            if (a.kind == Action::Kind::kBackwardWeight) {
              ASSERT_TRUE(inputDone.count(a.microBatch)) << name;
            }
            peak = std::max(peak, live.size());
            if (a.kind == Action::Kind::kBackward || a.kind == Action::Kind::kBackwardWeight)
              live.erase(a.microBatch);
          }
          const int bound = std::string(name) == "1f1b" ? S - s : S;
          ASSERT_LE(peak, static_cast<size_t>(std::min(bound, M)))
              << name << " S=" << S << " M=" << M << " s=" << s;
        }
}

// The protocol answers who an action talks to and which values a DP chunk holds, for every
// executor alike (stage-major ranks: rank = stage * replicas + replica).
TEST(ProtocolTest, PeersAndChunksOfEveryRank) {
  const RankLayout layout{3, 2};
  Action prev{}, next{}, dp{};
  prev.peer = Action::Peer::kPrev;
  next.peer = Action::Peer::kNext;
  dp.peer = Action::Peer::kReplica;
  dp.replica = 0;
  for (int r = 0; r < layout.size(); ++r) {
    const RankId id = layout.id(r);
    EXPECT_EQ(protocol::peerRank(layout, r, prev), id.stage > 0 ? r - 2 : -1) << r;
    EXPECT_EQ(protocol::peerRank(layout, r, next), id.stage < 2 ? r + 2 : -1) << r;
    EXPECT_EQ(protocol::peerRank(layout, r, dp), id.stage * 2) << r;
  }
  int64_t total = 0;
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(protocol::dpChunkBegin(10, c, 3), total);
    total += protocol::dpChunkValues(10, c, 3);
  }
  EXPECT_EQ(total, 10);
  EXPECT_EQ(protocol::dpChunkValues(10, 0, 3), 3);
  EXPECT_EQ(protocol::dpChunkValues(10, 2, 3), 4);
  EXPECT_EQ(protocol::dpOwnedChunk(2, 3), 0);
}

}  // namespace
}  // namespace slowpipe::runtime
