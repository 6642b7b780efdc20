// The replay's three event loops (simulate.cc): which rank acts next and when virtual time moves.
// The replay itself (the virtual backend) says what an action does through four hooks: act (run
// what a rank can do now), finishTask (its host work ended), finishWait (its message arrived) and
// deadlock (why a rank can never go on). Torch-free.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "simulator/packet_network.h"
#include "simulator/profile.h"
#include "simulator/replay_state.h"

namespace slowpipe::simulator {

class ReplayLoop {
 public:
  virtual ~ReplayLoop() = default;

 protected:
  explicit ReplayLoop(int ranks) : ranks_(static_cast<size_t>(ranks)) {}

  // Runs what rank i can do at now_; true if its state changed.
  virtual bool act(int i) = 0;
  // Rank i's host work ended at now_ / the message it waits for has arrived by now_.
  virtual void finishTask(int i) = 0;
  virtual void finishWait(int i) = 0;
  virtual std::runtime_error deadlock(int i) const = 0;

  // Every rank has a device of its own (speed 1 whatever the others do): an event queue, each
  // rank's next event (a task's end, a known arrival) in it; a rank waiting for a message not yet
  // sent is woken when it is posted (wake). The same replay as loopShared at a cost per event of
  // O(log N) instead of O(N).
  void loopDedicated();
  // network.model ns3: the same replay as loopDedicated on the packet network's scheduler; a
  // message's arrival is its delivery there, which wakes the rank waiting for it.
  void loopPacket(PacketNetwork& network);
  // Workers share the host's cores: every busy worker's speed depends on how many are busy
  // (profile.speedWithBusy), so each event re-times all of them (O(N) per event; shared hosts have
  // a few workers).
  void loopShared(const Profile& profile);

  // Every ready rank acts until it is busy, waiting or done, and its next event is scheduled.
  void drain(std::deque<int>& ready);
  // loopDedicated / loopPacket: rank i can act again (a message it waits for was posted or
  // delivered); false in loopShared, which looks at every rank after every event.
  bool waking() const { return wake_ != nullptr; }
  void wake(int i) { wake_->push_back(i); }
  void wakeAndDrain(int i) {
    wake_->push_back(i);
    drain(*wake_);
  }

  using Mode = RankState::Mode;
  std::vector<RankState> ranks_;
  double now_ = 0;

 private:
  // Rank i's event at now_: its task ended, or the message it waits for arrived.
  void endOfEvent(int i);
  // Rank i's next event, if it has one: the end of its task, or its message's arrival.
  void schedule(int i);
  void packetEvent(int i, uint64_t generation);
  void checkAllDone() const;

  std::deque<int>* wake_ = nullptr;  // loopDedicated, loopPacket: ranks to act on
  PacketNetwork* packet_ = nullptr;  // loopPacket
  std::priority_queue<std::tuple<double, int, uint64_t>,
                      std::vector<std::tuple<double, int, uint64_t>>, std::greater<>>
      queue_;  // loopDedicated: (time, rank, generation)
};

}  // namespace slowpipe::simulator
