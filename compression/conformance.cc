// Codec conformance checks (see conformance.h).
#include "compression/conformance.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <cmath>
#include <cstring>

#include "compression/frame.h"

namespace slowpipe::compression {
namespace {

using nlohmann::json;

// Deterministic activation-like values: normal(0, 1) from a xorshift stream; with outliers, every
// 997th value is 100x larger (the heavy channels of transformer activations).
std::vector<float> activations(int64_t n, uint64_t seed, bool outliers) {
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (int64_t i = 0; i < n; ++i) {
    const double u = next(), v = next();
    x[i] = static_cast<float>(std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v));
    if (outliers && i % 997 == 13) x[i] *= 100.0f;
  }
  return x;
}

struct Message {
  std::vector<float> x;
  FrameHeader header;
  CodecContext ctx;
};

// Message k of a sequence: epoch e, micro-batch m, rows with example ids m*rows .. (m+1)*rows-1.
Message message(const Shape& shape, int epoch, int mb, uint64_t seed, bool outliers = false,
                Direction direction = Direction::kForward) {
  Message m;
  m.x = activations(numelOf(shape), seed + 7919 * epoch + 104729 * mb, outliers);
  m.header.shape = shape;
  m.header.step = epoch * 100 + mb;
  m.header.microBatch = mb;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  for (int64_t r = 0; r < rows; ++r) m.header.exampleIds.push_back(mb * rows + r);
  m.ctx.direction = direction;
  m.ctx.step = m.header.step;
  m.ctx.epoch = epoch;
  m.ctx.microBatch = mb;
  m.ctx.exampleIds = m.header.exampleIds;
  m.ctx.key = std::string(direction == Direction::kForward    ? "fwd"
                          : direction == Direction::kBackward ? "bwd"
                                                              : "dp") +
              "/mb" + std::to_string(mb);
  if (direction == Direction::kGradient) {  // DP chunks carry no example ids
    m.header.exampleIds.clear();
    m.ctx.exampleIds.clear();
  }
  return m;
}

using MakeCodec = std::function<std::unique_ptr<Codec>()>;

constexpr Direction kDirections[] = {Direction::kForward, Direction::kBackward,
                                     Direction::kGradient};

struct Checks {
  json list = json::array();
  bool ok = true;
  void add(const std::string& name, bool pass, const std::string& detail) {
    list.push_back({{"name", name}, {"ok", pass}, {"detail", detail}});
    ok = ok && pass;
  }
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Runs fn in a forked child (or here): "rejected: <the codec's message>" if it threw, "accepted"
// if it returned, or the signal that ended it.
std::string outcome(const std::function<void()>& fn, bool isolate) {
  if (!isolate) {
    try {
      fn();
      return "accepted";
    } catch (const std::exception& e) {
      return std::string("rejected: ") + e.what();
    }
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("codec check: pipe2() failed: ") + std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("codec check: fork() failed: ") + std::strerror(errno));
  }
  // Exit codes of our own, so a child ended by anything else (a sanitizer's report, abort) is not
  // mistaken for an answer.
  constexpr int kRejected = 10, kAccepted = 11;
  if (pid == 0) {
    close(fds[0]);
    int code = kRejected;
    try {
      fn();
      code = kAccepted;
    } catch (const std::exception& e) {
      const std::string what = std::string(e.what()).substr(0, 400);
      (void)!write(fds[1], what.data(), what.size());  // best effort: the exit code is the answer
    }
    _exit(code);
  }
  close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    message.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return "crashed (signal " + std::to_string(WTERMSIG(status)) + ")";
  if (!WIFEXITED(status)) return "ended oddly";
  if (WEXITSTATUS(status) == kRejected) return "rejected: " + message;
  if (WEXITSTATUS(status) == kAccepted) return "accepted";
  return "ended with exit status " + std::to_string(WEXITSTATUS(status));
}

bool rejected(const std::string& outcome) { return outcome.rfind("rejected", 0) == 0; }

// Bytes placed so that they end where a protected page begins: a decoder that reads one byte past
// its payload touches the page and dies (SIGSEGV), which outcome() reports as a crash. Without
// isolation (no child to die) the bytes are an ordinary copy.
class GuardedBytes {
 public:
  GuardedBytes(const Bytes& b, bool guard) {
    if (!guard) {
      copy_ = b;
      data_ = copy_.data();
      return;
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t dataPages = (b.size() + page - 1) / page;
    len_ = (dataPages + 1) * page;
    void* p = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::runtime_error(std::string("codec check: mmap failed: ") + std::strerror(errno));
    base_ = static_cast<uint8_t*>(p);
    if (mprotect(base_ + dataPages * page, page, PROT_NONE) != 0)
      throw std::runtime_error(std::string("codec check: mprotect failed: ") +
                               std::strerror(errno));
    data_ = base_ + dataPages * page - b.size();
    if (!b.empty()) std::memcpy(data_, b.data(), b.size());
  }
  ~GuardedBytes() {
    if (base_) munmap(base_, len_);
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  const uint8_t* data() const { return data_; }

 private:
  Bytes copy_;
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t len_ = 0;
};

double seconds(const std::function<void()>& fn, double minSeconds) {
  using clock = std::chrono::steady_clock;
  fn();  // warm-up
  std::vector<double> t;
  double total = 0;
  while (t.size() < 3 || total < minSeconds) {
    const auto a = clock::now();
    fn();
    const double dt = std::chrono::duration<double>(clock::now() - a).count();
    t.push_back(dt);
    total += dt;
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// Round trip: shapes of rank 1-4 with odd sizes, first sighting then a second epoch.
void roundTrips(const MakeCodec& make, Checks& c) {
  const bool lossless = make()->id() == CodecId::kNone;
  for (const Shape& shape :
       std::vector<Shape>{{7}, {3, 5}, {3, 5, 7}, {3, 5, 7, 9}, {1, 1, 1, 1}, {5, 33, 129}}) {
    auto tx = make(), rx = make();
    std::string problem;
    for (int epoch = 0; epoch < 2 && problem.empty(); ++epoch) {
      Message m = message(shape, epoch, 0, 11);
      try {
        const Bytes f = encodeFrame(*tx, m.x.data(), m.header, m.ctx);
        size_t at = 0;
        const uint64_t payload = parseFrame(f.data(), f.size(), &at).payloadBytes,
                       bound = tx->maxPayloadBytes(shape);
        if (payload > bound)
          problem = "payload of " + std::to_string(payload) +
                    " bytes exceeds the codec's maxPayloadBytes " + std::to_string(bound);
        std::vector<float> y;
        const FrameHeader h = decodeFrame(*rx, f.data(), f.size(), m.ctx, y);
        if (h.shape != shape || static_cast<int64_t>(y.size()) != numelOf(shape))
          problem =
              "decoded " + std::to_string(y.size()) + " values of shape " + shapeString(h.shape);
        for (size_t i = 0; i < y.size() && problem.empty(); ++i)
          if (!std::isfinite(y[i])) problem = "value " + std::to_string(i) + " is not finite";
        if (problem.empty() && lossless && std::memcmp(y.data(), m.x.data(), 4 * y.size()) != 0)
          problem = "a lossless codec changed its input";
      } catch (const std::exception& e) {
        problem = std::string("threw: ") + e.what();
      }
    }
    c.add("round_trip " + shapeString(shape), problem.empty(),
          problem.empty() ? "2 epochs" : problem);
  }
}

// Determinism and mirrored state over 3 epochs x 3 micro-batches, in every direction a codec
// may serve (forward activations, backward gradients, data-parallel chunks: 1-D, no ids).
void stateInEveryDirection(const MakeCodec& make, Checks& c) {
  for (const Direction direction : kDirections) {
    const Shape shape = direction == Direction::kGradient ? Shape{1188} : Shape{4, 9, 33};
    const std::string suffix = std::string(" (") + directionName(direction) + ")";
    auto a = make(), b = make(), rx = make();
    if (direction == Direction::kGradient) {
      // A codec that needs what DP chunks do not carry (acsgd: example ids) refuses them; it is
      // then not a dp.codec, which a run says at its start the same way.
      try {
        Message m = message(shape, 0, 0, 23, false, direction);
        auto probe = make();
        encodeFrame(*probe, m.x.data(), m.header, m.ctx);
      } catch (const CodecError& e) {
        c.add("state" + suffix, true, std::string("not a data-parallel codec: ") + e.what());
        continue;
      }
    }
    std::string diverged, digest;
    int messages = 0;
    for (int epoch = 0; epoch < 3; ++epoch)
      for (int mb = 0; mb < 3; ++mb) {
        Message m = message(shape, epoch, mb, 23, false, direction);
        const Bytes fa = encodeFrame(*a, m.x.data(), m.header, m.ctx),
                    fb = encodeFrame(*b, m.x.data(), m.header, m.ctx);
        if (fa != fb && diverged.empty())
          diverged = "payloads differ at epoch " + std::to_string(epoch) + ", micro-batch " +
                     std::to_string(mb);
        std::vector<float> y;
        try {
          decodeFrame(*rx, fa.data(), fa.size(), m.ctx, y);
        } catch (const std::exception& e) {
          if (digest.empty()) digest = std::string("receiver threw: ") + e.what();
        }
        if (digest.empty() && a->stateDigest() != rx->stateDigest())
          digest = "sender and receiver digests differ after epoch " + std::to_string(epoch) +
                   ", micro-batch " + std::to_string(mb);
        ++messages;
      }
    c.add("determinism" + suffix, diverged.empty(),
          diverged.empty() ? std::to_string(messages) + " messages, equal payloads" : diverged);
    c.add("state" + suffix, digest.empty(),
          digest.empty() ? std::to_string(messages) + " messages, digests equal (" +
                               (a->stateDigest() ? "stateful" : "stateless") + ")"
                         : digest);
  }
}

// Damage: frames and payloads of an epoch-1 message, decoded by a receiver that saw epoch 0.
void damagedFramesAndPayloads(const MakeCodec& make, const ConformanceOptions& opt, Checks& c) {
  const Shape shape = {4, 9, 33};
  auto tx = make(), rx = make();
  Message m0 = message(shape, 0, 0, 31), m1 = message(shape, 1, 0, 37);
  const Bytes f0 = encodeFrame(*tx, m0.x.data(), m0.header, m0.ctx);
  std::vector<float> y;
  decodeFrame(*rx, f0.data(), f0.size(), m0.ctx, y);
  const Bytes frame = encodeFrame(*tx, m1.x.data(), m1.header, m1.ctx);
  size_t at = 0;
  const FrameHeader h = parseFrame(frame.data(), frame.size(), &at);
  const Bytes payload(frame.begin() + static_cast<std::ptrdiff_t>(at), frame.end());
  auto frameCase = [&](const std::string& name, Bytes damaged) {
    const GuardedBytes g(damaged, opt.isolate);
    const std::string r = outcome(
        [&] {
          std::vector<float> out;
          decodeFrame(*rx, g.data(), damaged.size(), m1.ctx, out);
        },
        opt.isolate);
    c.add("damage " + name, rejected(r), r);
  };
  frameCase("frame truncated by 1 byte", Bytes(frame.begin(), frame.end() - 1));
  frameCase("frame truncated to half",
            Bytes(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(frame.size() / 2)));
  frameCase("frame truncated to its header", Bytes(frame.begin(), frame.begin() + 32));
  Bytes longer = frame;
  longer.push_back(0);
  frameCase("frame extended by 1 byte", longer);
  for (size_t pos : {size_t{30}, size_t{33}, at + payload.size() / 2, frame.size() - 1}) {
    Bytes flipped = frame;
    flipped[pos] ^= 0x10;
    frameCase("frame bit flip at byte " + std::to_string(pos), flipped);
  }
  // Each damaged payload ends where a protected page begins: reading past it is a crash, FAIL.
  auto payloadCase = [&](const std::string& name, Bytes damaged, bool mustReject) {
    const GuardedBytes g(damaged, opt.isolate);
    const std::string r = outcome(
        [&] {
          std::vector<float> out(static_cast<size_t>(numelOf(shape)));
          CodecContext ctx = m1.ctx;
          rx->decode(g.data(), damaged.size(), h.shape, ctx, out.data());
        },
        opt.isolate);
    c.add("damage " + name, mustReject ? rejected(r) : rejected(r) || r == "accepted", r);
  };
  payloadCase("payload truncated by 1 byte", Bytes(payload.begin(), payload.end() - 1), true);
  Bytes longerPayload = payload;
  longerPayload.push_back(0);
  payloadCase("payload extended by 1 byte", longerPayload, true);
  payloadCase("empty payload", Bytes(), payload.size() > 0);
  for (size_t pos : {size_t{0}, payload.size() / 2, payload.size() - 1}) {
    if (payload.empty()) break;
    Bytes flipped = payload;
    flipped[pos] ^= 0xFF;
    payloadCase("payload bit flips at byte " + std::to_string(pos) + " (must not crash)", flipped,
                false);
  }
}

// Error on activations with outliers, in the steady state (second epoch).
void errorOnOutliers(const MakeCodec& make, Checks& c, json& figures) {
  const Shape shape = {8, 64, 256};
  auto tx = make(), rx = make();
  double maxAbs = 0, num = 0, den = 0;
  int64_t wire = 0;
  // The same examples seen again one epoch later: the activations have drifted a little
  // (x1 = x0 + 0.1 n), as fine-tuning moves them; the figures are of that second message.
  const Message first = message(shape, 0, 0, 41, true);
  const std::vector<float> drift = activations(numelOf(shape), 43, false);
  for (int epoch = 0; epoch < 2; ++epoch) {
    Message m = message(shape, epoch, 0, 41, true);
    m.x = first.x;
    if (epoch == 1)
      for (size_t i = 0; i < m.x.size(); ++i) m.x[i] += 0.1f * drift[i];
    const Bytes f = encodeFrame(*tx, m.x.data(), m.header, m.ctx);
    std::vector<float> y;
    decodeFrame(*rx, f.data(), f.size(), m.ctx, y);
    if (epoch == 1) {
      wire = static_cast<int64_t>(f.size());
      for (size_t i = 0; i < y.size(); ++i) {
        const double d = static_cast<double>(y[i]) - m.x[i];
        maxAbs = std::max(maxAbs, std::abs(d));
        num += d * d;
        den += static_cast<double>(m.x[i]) * m.x[i];
      }
    }
  }
  const double rel = std::sqrt(num / den);
  figures["error"] = {{"shape", shape},
                      {"max_abs", maxAbs},
                      {"rel_l2", rel},
                      {"frame_bytes", wire},
                      {"compression_ratio", 4.0 * numelOf(shape) / static_cast<double>(wire)}};
  const CodecId id = make()->id();
  const double bound = id == CodecId::kNone   ? 0.0
                       : id == CodecId::kFp16 ? 1e-3
                       : id == CodecId::kBf16 ? 1e-2
                                              : -1;
  if (bound >= 0)
    c.add("error bound", rel <= bound,
          "relative L2 " + fmt("%.3g", rel) + " (bound " + fmt("%.3g", bound) + ")");
  else
    c.add("error finite", std::isfinite(rel),
          "relative L2 " + fmt("%.3g", rel) + ", max |error| " + fmt("%.3g", maxAbs));
}

long minorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Speed: one thread, steady state, against memcpy of the same bytes in this run.
void speedAgainstMemcpy(const MakeCodec& make, const ConformanceOptions& opt, json& figures) {
  const int64_t rows = 8, width = 1024,
                n = std::max<int64_t>(rows * width,
                                      opt.speedElements / (rows * width) * rows * width);
  const Shape shape = {rows, n / (rows * width), width};
  auto tx = make(), rx = make();
  Message m0 = message(shape, 0, 0, 53), m1 = message(shape, 1, 0, 59);
  const Bytes f0 = encodeFrame(*tx, m0.x.data(), m0.header, m0.ctx);
  std::vector<float> y;
  decodeFrame(*rx, f0.data(), f0.size(), m0.ctx, y);
  // Encode and decode in lockstep, each frame decoded once, in order: what a link does, and the
  // only order in which codecs whose frames depend on the ones before (lowrank:basis=pca) decode.
  Bytes frame;
  std::vector<double> encT, decT;
  double total = 0;
  long faults = 0;  // minor page faults of the timed messages (fresh mappings of large blocks)
  for (int i = 0; encT.size() < 3 || total < opt.speedSeconds; ++i) {
    const long faultsBefore = minorFaults();
    const auto a = std::chrono::steady_clock::now();
    frame = encodeFrame(*tx, m1.x.data(), m1.header, m1.ctx);
    const auto b = std::chrono::steady_clock::now();
    decodeFrame(*rx, frame.data(), frame.size(), m1.ctx, y);
    const auto e = std::chrono::steady_clock::now();
    if (i == 0) continue;  // warm-up
    faults += minorFaults() - faultsBefore;
    encT.push_back(std::chrono::duration<double>(b - a).count());
    decT.push_back(std::chrono::duration<double>(e - b).count());
    total += encT.back() + decT.back();
  }
  auto median = [](std::vector<double> t) {
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  };
  const double enc = median(encT), dec = median(decT);
  std::vector<float> dst(m1.x.size());
  const double cpy =
      seconds([&] { std::memcpy(dst.data(), m1.x.data(), 4 * m1.x.size()); }, opt.speedSeconds);
  const double bytes = 4.0 * static_cast<double>(n);
  figures["speed"] = {{"bytes", bytes},
                      {"encode_gbps", bytes / enc / 1e9},
                      {"decode_gbps", bytes / dec / 1e9},
                      {"memcpy_gbps", bytes / cpy / 1e9},
                      {"encode_vs_memcpy", cpy / enc},
                      {"decode_vs_memcpy", cpy / dec},
                      {"page_faults_per_message", static_cast<double>(faults) / encT.size()}};
  // A link is sustained when the codec turns activations into frames, and frames back, at least
  // as fast as the link could carry the activations uncompressed.
  for (auto [name, bps] :
       {std::pair{"100Mbps", 1e8}, std::pair{"1Gbps", 1e9}, std::pair{"10Gbps", 1e10}})
    figures["speed"]["sustains_" + std::string(name)] =
        bytes / enc >= bps / 8 && bytes / dec >= bps / 8;
}

}  // namespace

json checkCodec(const std::function<std::unique_ptr<Codec>()>& make,
                const ConformanceOptions& opt) {
  Checks c;
  json figures = json::object();
  roundTrips(make, c);
  stateInEveryDirection(make, c);
  damagedFramesAndPayloads(make, opt, c);
  errorOnOutliers(make, c, figures);
  speedAgainstMemcpy(make, opt, figures);
  return {{"codec", make()->spec()}, {"checks", c.list}, {"figures", figures}, {"ok", c.ok}};
}

// Runs the check of one codec in a forked child, which sends its JSON back through a pipe: a codec
// (a plug-in above all) that crashes ends the child, not the check, and is reported by name.
nlohmann::json checkCodecIsolated(const std::string& spec, const ConformanceOptions& o) {
  using nlohmann::json;
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("codec check: pipe() failed");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("codec check: fork() failed");
  if (pid == 0) {
    close(fds[0]);
    std::string text;
    try {
      text = checkCodec([&] { return makeCodec(spec); }, o).dump();
    } catch (const std::exception& e) {
      text = json{{"codec", spec}, {"error", e.what()}}.dump();
    }
    for (size_t at = 0; at < text.size();) {
      const ssize_t n = write(fds[1], text.data() + at, text.size() - at);
      if (n <= 0) _exit(3);
      at += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string how;
  if (WIFSIGNALED(status))
    how = "crashed (signal " + std::to_string(WTERMSIG(status)) + ")";
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    how = "ended with exit status " + std::to_string(WEXITSTATUS(status));
  if (!how.empty() || text.empty())
    return {{"codec", spec},
            {"error", "the check " + (how.empty() ? std::string("returned nothing") : how) +
                          " while running codec '" + spec + "'"}};
  return json::parse(text);
}

}  // namespace slowpipe::compression
