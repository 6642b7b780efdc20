// Timing helpers shared by the benchmarks and the profiler (header-only): repeat until enough
// samples, report the median.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace slowpipe {

inline double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn once as warm-up, then until at least minReps samples and minSeconds of samples (or
// maxReps), and returns the median seconds per call.
inline double medianSeconds(const std::function<void()>& fn, int minReps = 5,
                            double minSeconds = 0.3, int maxReps = 2000) {
  fn();
  std::vector<double> samples;
  double total = 0.0;
  while (static_cast<int>(samples.size()) < maxReps &&
         (static_cast<int>(samples.size()) < minReps || total < minSeconds)) {
    const double t0 = nowSeconds();
    fn();
    const double dt = nowSeconds() - t0;
    samples.push_back(dt);
    total += dt;
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace slowpipe
