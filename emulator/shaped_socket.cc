// ShapedSender / ShapedReceiver (protocol in shaped_socket.h).
#include "emulator/shaped_socket.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace slowpipe::emulator {

namespace {

// SLOWPIPE_TEST_CLOCK_SKEW_S: seconds added to this process's clock, standing in for another host's
// clock in tests (read once). gOffset: the run's correction to the coordinator's clock.
double testSkew() {
  static const double skew = [] {
    const char* v = std::getenv("SLOWPIPE_TEST_CLOCK_SKEW_S");
    return v ? std::atof(v) : 0.0;
  }();
  return skew;
}
std::atomic<double> gOffset{0.0};

}  // namespace

double hostClockNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec) + testSkew();
}

void setClockOffset(double offsetS) { gOffset = offsetS; }

double monotonicNow() { return hostClockNow() + gOffset.load(); }

void sleepUntil(double t) {
  constexpr double kSpin = 100e-6;
  if (t - kSpin > monotonicNow()) {
    const double coarse = t - kSpin - gOffset.load() - testSkew();  // on CLOCK_MONOTONIC
    timespec ts;
    ts.tv_sec = static_cast<time_t>(coarse);
    ts.tv_nsec = static_cast<long>((coarse - static_cast<double>(ts.tv_sec)) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
  while (monotonicNow() < t) {
  }
}

ShapedSender::ShapedSender(zmq::socket_t& socket, LinkSpec spec, const LinkModelInfo* model,
                           uint64_t seed)
    : socket_(socket),
      clock_(std::move(spec), monotonicNow(), seed),
      info_(model),
      model_(model ? model->make() : nullptr) {
  clock_.setOpenedAt(
      monotonicNow());  // the peer's connection is opened now (ZeroMQ connects at once)
}

void ShapedSender::send(const void* data, size_t size) { send(zmq::message_t(data, size)); }

void ShapedSender::send(zmq::message_t payload) {
  Envelope e;
  e.bytes = payload.size();
  if (info_ && info_->pacesAtSender) {
    // Queue limit: wait until what is already on the link fits under it.
    const double now = monotonicNow();
    const double maxBacklog =
        8.0 * static_cast<double>(clock_.spec().queueBytes) / clock_.rateAt(now);
    if (clock_.backlogSeconds(now) > maxBacklog)
      sleepUntil(now + clock_.backlogSeconds(now) - maxBacklog);
  }
  e.sendTime = monotonicNow();
  if (model_)
    e.arrivalTime = std::max(0.0, model_->stamp(clock_, e.sendTime, e.bytes));  // 0: unstamped
  if (access_ && e.arrivalTime > 0)
    e.arrivalTime = std::max(e.arrivalTime, access_->send(path_, e.sendTime, e.bytes));
  socket_.send(zmq::buffer(&e, sizeof e), zmq::send_flags::sndmore);
  socket_.send(std::move(payload), zmq::send_flags::none);
}

ShapedReceiver::ShapedReceiver(zmq::socket_t& socket, double latencyS, double jitterS,
                               uint64_t seed)
    : socket_(socket), latencyS_(latencyS), jitterS_(jitterS), rng_(seed) {}

bool ShapedReceiver::pull(bool wait, int timeoutMs) {
  zmq::message_t head;
  if (wait) {
    // zmq_poll may report POLLIN when only commands were pending (a peer's pipe attaching after
    // its CURVE handshake, for one): poll again until a message comes or the time is up.
    const double deadline = hostClockNow() + (timeoutMs < 0 ? 1e9 : timeoutMs * 1e-3);
    while (!socket_.recv(head, zmq::recv_flags::dontwait)) {
      const double left = deadline - hostClockNow();
      if (left <= 0) return false;
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(static_cast<long>(std::ceil(left * 1000))));
    }
  } else if (!socket_.recv(head, zmq::recv_flags::dontwait)) {
    return false;
  }
  const double now = monotonicNow();
  if (head.size() != sizeof(Envelope) || !head.more())
    throw std::runtime_error("shaped socket: malformed envelope of " + std::to_string(head.size()) +
                             " bytes (expected " + std::to_string(sizeof(Envelope)) + ")");
  ShapedMessage m;
  std::memcpy(&m.envelope, head.data(), sizeof(Envelope));
  (void)socket_.recv(m.payload, zmq::recv_flags::none);  // the second part follows atomically
  if (m.payload.size() != m.envelope.bytes)
    throw std::runtime_error("shaped socket: payload of " + std::to_string(m.payload.size()) +
                             " bytes, envelope says " + std::to_string(m.envelope.bytes));
  m.receivedAt = now;
  m.due = m.envelope.arrivalTime;
  if (maxAheadS_ > 0 && !(m.due - now <= maxAheadS_))  // also NaN
    throw std::runtime_error("shaped socket: a message stamped to arrive " +
                             std::to_string(m.due - now) + " s from now (envelope arrivalTime " +
                             std::to_string(m.due) + "), more than the " +
                             std::to_string(maxAheadS_) + " s this receiver waits for one");
  if (m.due == 0) {  // kernel-paced: the receiver adds latency (+ jitter) to the real receipt
    double delay = latencyS_;
    if (jitterS_ > 0) {
      std::normal_distribution<double> d(0.0, jitterS_);
      delay = std::max(0.0, delay + std::clamp(d(rng_), -3 * jitterS_, 3 * jitterS_));
    }
    m.due = now + delay;
  }
  m.due = std::max(m.due, lastDue_);  // FIFO
  lastDue_ = m.due;
  pending_.push_back(std::move(m));
  return true;
}

void ShapedReceiver::drainFor(double until) {
  // Blocks in zmq_poll (millisecond timeouts) while more than a millisecond is left, so a waiting
  // receiver wakes only when a message comes: napping 100 us at a time cost a waiting worker 10-12%
  // of a core in wake-ups, taken from the stages that compute beside it (3 workers on 2 cores).
  // The last millisecond naps in 100 us ticks, so receipt times stay within a tick.
  constexpr double kTick = 100e-6;
  while (true) {
    while (pull(false, 0)) {
    }
    const double now = monotonicNow();
    if (now >= until) return;
    if (until - now <= 2 * kTick) return sleepUntil(until);  // last stretch: precise
    const long blockMs = static_cast<long>((until - now - 2 * kTick) * 1000);
    if (blockMs >= 1) {
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(blockMs));
      continue;
    }
    const timespec nap{0, static_cast<long>(kTick * 1e9)};  // otherwise sleep, do not spin
    nanosleep(&nap, nullptr);
  }
}

std::optional<ShapedMessage> ShapedReceiver::recv(int timeoutMs) {
  if (pending_.empty() && !pull(true, timeoutMs)) return std::nullopt;
  ShapedMessage& head = pending_.front();
  if (model_ && head.envelope.arrivalTime == 0)
    head.due = model_->bill(link_, head.envelope.sendTime, head.envelope.bytes);
  drainFor(pending_.front().due);
  ShapedMessage m = std::move(pending_.front());
  pending_.pop_front();
  m.deliveredAt = monotonicNow();
  return m;
}

}  // namespace slowpipe::emulator
