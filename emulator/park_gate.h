// Holds a forwarding thread (the delay line's) still around a fork() without exec:
// parked at the top of its loop it holds no lock and allocates nothing, so the child copies no
// lock it held (AddressSanitizer's allocator has no fork handlers: a child forked while the
// forwarder allocated deadlocked in its first malloc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

namespace slowpipe::emulator {

class ParkGate {
 public:
  // Another thread: asks the forwarder to hold still and waits until it does (or has stopped);
  // `wake` makes the forwarder's loop come round.
  void park(const std::function<void()>& wake, const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> lock(mu_);
    wanted_ = true;
    wake();
    cv_.wait(lock, [&] { return parked_ || stop.load(); });
  }
  void unpark() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wanted_ = false;
    }
    cv_.notify_all();
  }
  // The forwarder, at the top of its loop: holds still while asked to.
  void checkpoint(const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!wanted_) return;
    parked_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !wanted_ || stop.load(); });
    parked_ = false;
  }
  // On stop: releases whoever waits.
  void release() { cv_.notify_all(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, parked_ = false;  // under mu_
};

}  // namespace slowpipe::emulator
