// What the replay (simulate.cc) keeps of a message and of a worker between events; shared by its
// parts: the message bill (message_bill.h), the mailroom (mailroom.h), the event loops
// (replay_loop.h) and the virtual backend itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "runtime/exec/protocol.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/slowdown.h"
#include "runtime/records/records.h"

namespace slowpipe::simulator {

struct Message {
  double sentAt = 0,
         arrival = -1;  // arrival < 0: unstamped, the receiver's part of the link model bills it
  int64_t bytes = 0;
  bool inFlight =
      false;  // network.model ns3: on its way through the packet network, arrival not yet known
};

// A message's key on its link (runtime/exec/protocol.h: kind, step, micro-batch (a DP message: its
// shard), boundary chunk; DP messages add their round; -1 for a pipeline message).
struct MailKey {
  int from, to, step, microBatch, chunk, round;
  runtime::Action::Message message;
  bool operator==(const MailKey& o) const {
    return from == o.from && to == o.to && step == o.step && microBatch == o.microBatch &&
           chunk == o.chunk && round == o.round && message == o.message;
  }
  // The key of action `a` on the link from -> to, in the sender's step and DP round.
  static MailKey of(int from, int to, const runtime::Action& a, int step, int round, int chunk) {
    return {from,     to,
            step,     runtime::protocol::keySlot(a),
            chunk,    runtime::protocol::keyRound(a, round),
            a.message};
  }
};
struct MailKeyHash {
  size_t operator()(const MailKey& k) const {
    size_t h = 0;
    for (const int v :
         {k.from, k.to, k.step, k.microBatch, k.chunk, k.round, static_cast<int>(k.message)})
      h = (h ^ static_cast<size_t>(static_cast<unsigned>(v))) *
          0x100000001B3ull;  // FNV-1a over the fields
    return h;
  }
};

// A worker (rank = stage x R + replica) is ready for its next action, busy on the host (compute or
// codec work, `remaining` seconds of it at full speed), or waiting for a message (its arrival known
// or not yet). Its executor (runtime/exec/executor.h) walks its list; this is what the virtual
// backend keeps of it besides.
struct RankState {
  enum class Mode { kReady, kBusy, kWaiting, kDone } mode = Mode::kReady;
  int step = 0;
  runtime::RankStepRecord
      record;            // of the step in hand (its times: compute, encode, decode, wait; bytes)
  double other = 0;      // DP packing, outer step: in the step's time, in no column
  int round = 0;         // the DP round in progress
  bool ownSent = false;  // this round's own chunk (ring) / shard average (ps) is encoded
  // busy: the task
  double remaining = 0, taskStart = 0;
  double* bucket = nullptr;
  bool postAfter = false;  // the action is a send: post the message when its encode ends
  MailKey postKey{};
  int64_t postBytes = 0;
  // waiting
  double waitStart = 0, arrival = -1;
  double waitedS =
      0;  // waited since its last compute event (StageCost::idle: the next one pays it)
  runtime::SlowdownMeter
      slowdown;  // runtime.slowdown: compute at full speed, and the straggler's extra
  int64_t recvBytes = 0;
  bool onTimeline = false;
  bool evaluating = false;  // replaying the evaluation after its step (evalSchedule)
  std::set<std::pair<int, std::string>> warmed;  // (virtual stage, kind) whose first event has run
  uint64_t generation = 0;  // of its pending event in the queue (older ones are stale)
};

}  // namespace slowpipe::simulator
