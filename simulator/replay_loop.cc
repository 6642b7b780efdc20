// The replay's event loops (see replay_loop.h).
#include "simulator/replay_loop.h"

#include <algorithm>
#include <limits>

namespace slowpipe::simulator {

void ReplayLoop::loopDedicated() {
  std::deque<int> ready;
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i) ready.push_back(i);
  wake_ = &ready;
  while (true) {
    drain(ready);
    if (queue_.empty()) break;
    const auto [t, i, generation] = queue_.top();
    queue_.pop();
    if (generation != ranks_[i].generation) continue;  // superseded
    now_ = t;
    endOfEvent(i);
    ready.push_back(i);
  }
  wake_ = nullptr;
  checkAllDone();
}

void ReplayLoop::drain(std::deque<int>& ready) {
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop_front();
    while (act(i)) {
    }
    schedule(i);
  }
}

void ReplayLoop::endOfEvent(int i) {
  RankState& st = ranks_[i];
  if (st.mode == Mode::kBusy) {
    st.remaining = 0;
    finishTask(i);
  } else if (st.mode == Mode::kWaiting) {
    finishWait(i);
  }
}

void ReplayLoop::loopPacket(PacketNetwork& network) {
  std::deque<int> ready;
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i) ready.push_back(i);
  wake_ = &ready;
  packet_ = &network;
  network.at(0, [this] {
    now_ = 0;
    drain(*wake_);
  });
  network.run();
  wake_ = nullptr;
  packet_ = nullptr;
  checkAllDone();
}

void ReplayLoop::packetEvent(int i, uint64_t generation) {
  if (generation != ranks_[i].generation) return;  // superseded
  now_ = packet_->now();
  endOfEvent(i);
  wake_->push_back(i);
  drain(*wake_);
}

void ReplayLoop::schedule(int i) {
  RankState& st = ranks_[i];
  const double t = st.mode == Mode::kBusy      ? now_ + st.remaining
                   : st.mode == Mode::kWaiting ? st.arrival
                                               : -1;
  if (t < 0) return;
  if (packet_)
    packet_->at(t, [this, i, g = ++st.generation] { packetEvent(i, g); });
  else
    queue_.push({t, i, ++st.generation});
}

void ReplayLoop::checkAllDone() const {
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i)
    if (ranks_[i].mode != Mode::kDone) throw deadlock(i);
}

void ReplayLoop::loopShared(const Profile& profile) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const int n = static_cast<int>(ranks_.size());
  while (true) {
    // Every worker that can act at now_ does so until it is busy, waiting, or done.
    for (bool changed = true; changed;) {
      changed = false;
      for (int i = 0; i < n; ++i) changed |= act(i);
    }
    int busy = 0;
    bool done = true;
    for (const auto& st : ranks_) {
      busy += st.mode == Mode::kBusy;
      done &= st.mode == Mode::kDone;
    }
    if (done) return;
    const double rate = profile.speedWithBusy(busy);
    double next = kInf;
    for (const auto& st : ranks_) {
      if (st.mode == Mode::kBusy) next = std::min(next, now_ + st.remaining / rate);
      if (st.mode == Mode::kWaiting && st.arrival >= 0) next = std::min(next, st.arrival);
    }
    if (next == kInf)
      for (int i = 0; i < n; ++i)
        if (ranks_[i].mode == Mode::kWaiting) throw deadlock(i);
    const double dt = next - now_;
    now_ = next;
    for (int i = 0; i < n; ++i) {
      RankState& st = ranks_[i];
      if (st.mode == Mode::kBusy) {
        st.remaining -= dt * rate;
        if (st.remaining <= 1e-12 * std::max(1.0, now_)) finishTask(i);
      } else if (st.mode == Mode::kWaiting && st.arrival >= 0 && st.arrival <= now_) {
        finishWait(i);
      }
    }
  }
}

}  // namespace slowpipe::simulator
