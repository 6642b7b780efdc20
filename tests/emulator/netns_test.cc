// Kernel backend (root only; skipped with the reason otherwise): HTB rate accuracy through real
// namespaces and veths, and cleanup on destruction, on SIGTERM and after kill -9.
#include "emulator/netns.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "emulator/calibrate.h"
#include "emulator/command.h"
#include "emulator/devshaper.h"
#include "emulator/live_names.h"
#include "tests/host_time.h"

namespace slowpipe::emulator {
namespace {

// Namespaces owned by `pid` that are still there.
int namespacesOf(pid_t pid) {
  const std::string out = runCommand({"ip", "netns", "list"}).output;
  const std::string prefix = "slowpipe-" + std::to_string(pid) + "-";
  int n = 0;
  for (size_t p = out.find(prefix); p != std::string::npos; p = out.find(prefix, p + 1)) ++n;
  return n;
}

int vethsOf(pid_t pid) {
  const std::string out = runCommand({"ip", "-o", "link", "show"}).output;
  return out.find("sp" + std::to_string(pid % 10000000) + "e") == std::string::npos ? 0 : 1;
}

// The 5% bound on a shaped rate is the Release suite's claim. Under AddressSanitizer this suite
// checks memory: the user-space delay line runs 2-3x slower there and shares 2 cores with the
// instrumented sender and receiver (three runs read 0.997, 0.915 and 0.905 of 1 Gbps; a clean-clone
// CI run 0.85 of 200 Mbps once). Its wider bound still fails an unshaped link (no run may exceed
// 1.05) and one that loses a quarter of its rate, as the WAN calibration once did.
#ifdef __SANITIZE_ADDRESS__
constexpr double kRateTolerance = 0.10;
#else
constexpr double kRateTolerance = 0.05;
#endif

// Three calibrations of one link: each run's rate (of the configured) and median delay, their
// JSON, and the hypervisor's share of the CPU over the three. Every run is bounded where host time
// cannot push it: no rate past 1.05 of the configured, no delay below `delay - slack`.
struct ThreeRuns {
  std::vector<double> rates, latencies;
  std::vector<nlohmann::json> docs;
  std::string dump;
  double steal = 0;
  double best() const { return *std::max_element(rates.begin(), rates.end()); }
  double least() const { return *std::min_element(latencies.begin(), latencies.end()); }
};

ThreeRuns calibrateThrice(const CalibrationOptions& o, double slack) {
  ThreeRuns t;
  const testsupport::StealMeter meter;
  for (int run = 0; run < 3; ++run) {
    t.docs.push_back(calibrateLink(o));
    const auto& r = t.docs.back();
    t.rates.push_back(r["achieved_bps"].get<double>() / o.link.bandwidthBps);
    t.latencies.push_back(r["latency_median_s"].get<double>());
    t.dump += r.dump() + "\n";
    EXPECT_LT(t.rates.back(), 1.05) << "run " << run << " beat the configured rate:\n" << r.dump(2);
    EXPECT_GE(t.latencies.back(), o.link.latencyS - slack)
        << "run " << run << " delivered before its delay:\n"
        << r.dump(2);
  }
  t.steal = meter.share();
  return t;
}

class KernelBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& f = kernelFeatures();
    if (!f.root) GTEST_SKIP() << "kernel backend needs root: " << f.note;
    if (!f.htb) GTEST_SKIP() << "kernel has no HTB qdisc";
  }
  void TearDown() override {
    EXPECT_EQ(namespacesOf(getpid()), 0) << "a project namespace survived the test";
    EXPECT_EQ(vethsOf(getpid()), 0) << "a project veth survived in the root namespace";
  }
};

TEST_F(KernelBackendTest, WithoutRootTheErrorSaysSo) {
  // A child drops to nobody and tries: it must get a clear error and create nothing.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    std::string msg = "no error";
    if (setgid(65534) == 0 && setuid(65534) == 0) {
      try {
        NetnsFabric fabric(2, {FabricEdge{0, 1, LinkSpec{}, LinkSpec{}}});
      } catch (const std::exception& e) {
        msg = e.what();
      }
    } else {
      msg = "could not drop privileges";
    }
    (void)!write(fds[1], msg.data(), msg.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[512] = {0};
  (void)!read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  waitpid(child, nullptr, 0);
  EXPECT_NE(std::string(buf).find("not root"), std::string::npos) << buf;
  EXPECT_EQ(namespacesOf(child), 0);
}

// The children `parent` forked without exec (they carry this binary's name), oldest first.
std::vector<pid_t> forkedChildren(pid_t parent) {
  auto statOf = [](const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
  };
  const std::string self = statOf("/proc/self/stat");
  const std::string comm = self.substr(self.find('('), self.rfind(')') - self.find('(') + 1);
  std::vector<std::pair<unsigned long long, pid_t>> found;  // (start time, pid)
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string st = statOf(e.path().string() + "/stat");
    const size_t close = st.rfind(')');
    if (close == std::string::npos || st.substr(st.find('('), close - st.find('(') + 1) != comm)
      continue;
    std::istringstream rest(st.substr(close + 2));
    std::string field;
    std::vector<std::string> f;  // from field 3 (state) on
    while (rest >> field) f.push_back(field);
    if (f.size() < 20 || std::stoi(f[1]) != parent) continue;
    found.push_back({std::stoull(f[19]), std::stoi(name)});  // field 22: start time
  }
  std::sort(found.begin(), found.end());
  std::vector<pid_t> out;
  for (const auto& [start, pid] : found) out.push_back(pid);
  return out;
}

// A calibration's receiver and sender (forked without exec by `parent`, in that order): the same
// two children in two looks 100 ms apart, since the ip and tc commands the calibration runs first
// carry this binary's name too for the moment between their fork and exec. Empty after 15 s.
std::vector<pid_t> calibrationChildren(pid_t parent) {
  std::vector<pid_t> last;
  for (int i = 0; i < 150; ++i) {
    usleep(100000);
    const std::vector<pid_t> now = forkedChildren(parent);
    if (now.size() == 2 && now == last) return now;
    last = now;
  }
  return {};
}

// A kernel-path calibration whose receiver dies (a signal, a crash) ends at once with an error that
// says so, and leaves nothing: its sender used to wait out a minute for a go-ahead or block for
// good on a send, and the run with it (a SIGTERM that reached the forked receiver of a sweep's
// calibration, and not its sender, held the sweep 90 s).
TEST_F(KernelBackendTest, CalibrationEndsWhenItsReceiverDies) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(report[0]);
    std::string said = "the calibration returned";
    try {
      CalibrationOptions o;
      o.backend = "tc";
      o.link.bandwidthBps = 100e6;
      o.messages = 400;  // 1 MiB each: 34 s at 100 Mbps, far longer than this test waits
      calibrateLink(o);
    } catch (const std::exception& e) {
      said = e.what();
    }
    (void)!write(report[1], said.data(), said.size());
    _exit(0);
  }
  close(report[1]);
  const std::vector<pid_t> kids =
      calibrationChildren(child);  // its receiver and its sender, in that order
  if (kids.size() < 2) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    cleanupNamespaces(false);  // what the killed calibration left
    FAIL() << "the calibration's two children did not appear within 15 s";
  }
  usleep(500000);  // into the transfer
  kill(kids[0], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 300 && (done = waitpid(child, &status, WNOHANG)) == 0; ++i) usleep(100000);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    for (pid_t k : kids) kill(k, SIGKILL);
    cleanupNamespaces(false);  // what the killed calibration left
  }
  char buf[1024] = {0};
  (void)!read(report[0], buf, sizeof buf - 1);
  close(report[0]);
  ASSERT_NE(done, 0) << "still calibrating 30 s after its receiver was killed";
  EXPECT_LT(took, 5.0) << buf;
  EXPECT_NE(std::string(buf).find("calibration receiver: died: killed by signal 9"),
            std::string::npos)
      << buf;
  EXPECT_TRUE(forkedChildren(child).empty());
  EXPECT_EQ(kill(kids[1], 0), -1) << "its sender " << kids[1] << " outlived it";
  EXPECT_EQ(namespacesOf(child), 0) << "the calibration's namespaces outlived it";
}

// The calibration's children die with the process that forked them: a launcher killed outright
// (kill -9) used to leave them running out their own timeouts (up to a minute).
TEST_F(KernelBackendTest, CalibrationChildrenDieWithTheirParent) {
  const pid_t child = fork();
  if (child == 0) {
    CalibrationOptions o;
    o.backend = "tc";
    o.link.bandwidthBps = 100e6;
    o.messages = 400;  // 34 s at 100 Mbps
    try {
      calibrateLink(o);
    } catch (...) {
    }
    _exit(0);
  }
  const std::vector<pid_t> kids = calibrationChildren(child);
  usleep(500000);  // into the transfer
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto alive = [](pid_t p) {  // neither gone nor a zombie waiting for init
    std::ifstream in("/proc/" + std::to_string(p) + "/stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
  };
  bool any = true;
  for (int i = 0; i < 40 && any; ++i) {
    any = std::any_of(kids.begin(), kids.end(), alive);
    if (any) usleep(50000);
  }
  for (pid_t k : kids) kill(k, SIGKILL);
  cleanupNamespaces(false);  // kill -9 leaves the namespaces: `emulator cleanup` removes them
  ASSERT_EQ(kids.size(), 2u) << "the calibration's two children did not appear within 15 s";
  EXPECT_FALSE(any) << "a calibration child outlived its parent by 2 s";
}

// On veth pairs (where the kernel has netem, or has no TUN device) nothing forwards packets in user
// space, so nothing can be moderated: a moderated edge says so in the mechanism (the launcher
// warns) instead of being recorded as if it had been applied. This kernel has no netem: a child
// hides /dev/net/tun in a mount namespace of its own to get that path.
TEST_F(KernelBackendTest, ModerationOnVethPairsSaysItIsNotApplied) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    std::string said;
    try {
      if (!kernelFeatures().netem &&
          (unshare(CLONE_NEWNS) != 0 ||
           mount(nullptr, "/dev", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
           mount("none", "/dev/net", "tmpfs", 0, nullptr) != 0))
        throw std::runtime_error(std::string("hiding /dev/net/tun: ") + std::strerror(errno));
      for (double moderationS : {100e-6, 0.0}) {
        NetnsFabric fabric(2, {FabricEdge{0, 1, LinkSpec{}, LinkSpec{}, moderationS}});
        const nlohmann::json m = fabric.mechanism();
        said += m.value("path", "?") + " | " + m.value("moderation", "(none)") + "\n";
      }
    } catch (const std::exception& e) {
      said = std::string("error: ") + e.what();
    }
    (void)!write(out[1], said.data(), said.size());
    _exit(0);
  }
  close(out[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;)
    said.append(buf, static_cast<size_t>(n));
  close(out[0]);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(said,
            "veth pair | not applied: the edges are veth pairs (no delay line), so "
            "network.moderation_us has no effect\n"
            "veth pair | (none)\n");
  EXPECT_EQ(namespacesOf(child), 0);
}

class KernelRateTest : public KernelBackendTest, public ::testing::WithParamInterface<double> {};

TEST_P(KernelRateTest, HtbGoodputWithin5Percent) {
  // Three runs of ~1.2 s each. On 2 shared cores a stall of the host costs a run goodput and adds
  // latency, never the reverse: so the rate is judged by the best run and the delay by the least
  // one (one clean-clone CI run here read 0.906, 0.921 and 0.974 of 1 Gbps; the CLI, the same hour,
  // 0.33 to 0.95 in six runs and then 0.97 to 0.997 in four). Every run is bounded above: none may
  // beat the rate by 5%, which a missing or broken shaper would.
  CalibrationOptions o;
  o.backend = "tc";
  o.link.bandwidthBps = GetParam();
  o.link.latencyS = 0.002;
  o.messageBytes = 256 * 1024;
  o.messages = static_cast<int>(std::max(8.0, 1.2 * o.link.bandwidthBps / (8.0 * o.messageBytes)));
  o.probes = 50;
  const ThreeRuns t = calibrateThrice(o, 0.5e-3);
  const std::string& runs = t.dump;
  for (const auto& r : t.docs) {
    // Without netem the namespaces are joined by the delay line (TUN), else by shaped veths.
    const bool line = !kernelFeatures().netem && access("/dev/net/tun", R_OK | W_OK) == 0;
    EXPECT_EQ(r["mechanism"]["rate"].get<std::string>().rfind(line ? "delay line" : "htb", 0), 0u)
        << r.dump();
    EXPECT_EQ(r["mechanism"]["netem_available"].get<bool>(), kernelFeatures().netem);
  }
  const double steal = t.steal, best = t.best(), least = t.least();
  SKIP_IF_HOST_TIME(best < 1.0 - kRateTolerance || least > 0.002 + 0.5e-3, steal)
      << "shaped runs:\n"
      << runs;
  if (best < 1.0 - kRateTolerance && o.link.bandwidthBps >= 1e9) {
    // Whether this host can carry the rate at all: the same path with a rate 10x higher. A host
    // whose line cannot forward 1.05x the rate unshaped says nothing about the shaper (one CI run
    // on a slower host read 0.62-0.72 at 1 Gbps with another test beside it).
    CalibrationOptions open = o;
    open.link.bandwidthBps = 10 * o.link.bandwidthBps;
    const double capacity = calibrateLink(open)["achieved_bps"].get<double>();
    if (capacity < 1.05 * o.link.bandwidthBps)
      GTEST_SKIP() << "this host forwarded only " << capacity / 1e9
                   << " Gbit/s unshaped; shaped runs:\n"
                   << runs;
  }
  EXPECT_GE(best, 1.0 - kRateTolerance) << runs;
  // Without netem the delay is added in user space on top of the real receipt: allow 0.5 ms.
  if (least > 0.002 + 0.5e-3) {
    // Whether this host can time the path at all: the same link with no delay. A host whose own
    // forwarding takes more than the tolerance says nothing about the delay (one clean-clone CI
    // here read a 4.3 ms median at 2 ms; the test passed alone afterwards).
    CalibrationOptions bare = o;
    bare.link.latencyS = 0;
    const double floor = calibrateLink(bare)["latency_median_s"].get<double>();
    if (floor > 0.5e-3)
      GTEST_SKIP() << "this host's path took " << floor * 1e3 << " ms with no delay; shaped runs:\n"
                   << runs;
  }
  EXPECT_LE(least, 0.002 + 0.5e-3) << runs;
}

// A kernel-path link at a WAN delay (200 Mbps, 25 ms one way): its rate is calibrated with the
// delay at 0 and its delay over the link as configured. Measured over the 50 ms round trip, the
// 0.3 s bulk transfer a run calibrates with read 145 Mbps (one connection's slow start), -28%,
// and flagged every WAN setting link_ok false.
TEST_F(KernelBackendTest, WanDelayCalibratesTheRateNotTheConnectionsWindow) {
  CalibrationOptions o;
  o.backend = "tc";
  o.link.bandwidthBps = 200e6;
  o.link.latencyS = 0.025;
  o.messageBytes = 256 * 1024;
  o.messages = 28;  // 0.3 s at the rate, as the launcher sizes it
  o.probes = 20;
  // Three runs, judged as KernelRateTest judges them (the best rate, the least delay, every run
  // bounded): one clean-clone CI run under AddressSanitizer read 0.85 of the rate once, where the
  // failure this test guards against reads 0.72 every time.
  const ThreeRuns t = calibrateThrice(o, 1e-3);
  for (const auto& r : t.docs) {
    EXPECT_TRUE(r.contains("rate_measured_with")) << r.dump(2);
    EXPECT_TRUE(r.contains("host_cpu_steal")) << r.dump(2);
  }
  const double shortfall = std::max(0.08, kRateTolerance);
  SKIP_IF_HOST_TIME(t.best() < 1.0 - shortfall || t.least() > 0.025 + 1e-3, t.steal) << "runs:\n"
                                                                                     << t.dump;
  EXPECT_GE(t.best(), 1.0 - shortfall) << t.dump;
  EXPECT_LE(t.least(), 0.025 + 1e-3) << t.dump;
}

INSTANTIATE_TEST_SUITE_P(Rates, KernelRateTest, ::testing::Values(100e6, 1e9),
                         [](const auto& info) {
                           return std::to_string(static_cast<int>(info.param / 1e6)) + "Mbps";
                         });

// A SIGTERM that lands while the process is inside fork() (runCommand forks for every ip and tc
// call) must still run the cleanups and end the process. The cleanups used to fork() from the
// handler, which waits for glibc's atfork lock that the interrupted fork holds: an ASan run of
// SigtermRemovesEverything hung there for minutes with both namespaces alive. Needs no root: the
// cleanup runs `true` the way the backends run `ip netns delete`.
void cleanupRunsTrue() {
  const char* argv[] = {"true", nullptr};
  runFromSignal(argv, false);
  static const char kSaid[] = "cleaned\n";
  (void)!write(1, kSaid, sizeof kSaid - 1);
}

TEST(SignalCleanupTest, ASignalInsideForkStillCleansUpAndEnds) {
  for (int trial = 0; trial < 20; ++trial) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t child = fork();
    if (child == 0) {
      dup2(out[1], 1);
      close(out[0]);
      addSignalCleanup(cleanupRunsTrue);
      // glibc's fork takes the atfork lock only in a process with more than one thread, as every
      // backend's is (its delay lines, ZeroMQ's I/O threads).
      std::thread([] { pause(); }).detach();
      (void)!write(1, "r", 1);
      for (;;) {  // nothing but forks: most of the time is spent inside fork()
        const pid_t p = fork();
        if (p == 0) _exit(0);
        if (p > 0) waitpid(p, nullptr, 0);
      }
    }
    close(out[1]);
    char ready = 0;
    ASSERT_EQ(read(out[0], &ready, 1), 1);
    usleep(2000 + 1000 * trial);
    kill(child, SIGTERM);
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 500 && (done = waitpid(child, &status, WNOHANG)) == 0; ++i) usleep(10000);
    if (done == 0) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      close(out[0]);
      FAIL() << "trial " << trial
             << ": the process was still alive 5 s after SIGTERM (its handler hung)";
    }
    std::string said;
    char buf[64];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;)
      said.append(buf, static_cast<size_t>(n));
    close(out[0]);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
        << "trial " << trial << ": status " << status;
    EXPECT_NE(said.find("cleaned"), std::string::npos)
        << "trial " << trial << ": the cleanup did not run";
  }
}

TEST_F(KernelBackendTest, SigtermRemovesEverything) {
  const pid_t child = fork();
  if (child == 0) {
    NetnsFabric fabric(2, {FabricEdge{0, 1, LinkSpec{}, LinkSpec{}}});
    std::printf("ready\n");
    pause();
    _exit(0);
  }
  for (int i = 0; i < 100 && namespacesOf(child) < 2; ++i) usleep(50000);
  ASSERT_EQ(namespacesOf(child), 2);
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(namespacesOf(child), 0);
}

// A child forked without exec inherits the handler and the list of live namespaces: a SIGTERM that
// reaches only the child ends the child and must leave its parent's namespaces alone (it used to
// delete them from under the parent, which was still using them).
TEST_F(KernelBackendTest, ASignalToAForkedChildLeavesItsParentsNamespaces) {
  NetnsFabric fabric(2, {FabricEdge{0, 1, LinkSpec{}, LinkSpec{}}});
  ASSERT_EQ(namespacesOf(getpid()), 2);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    (void)!write(ready[1], "r", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char r = 0;
  ASSERT_EQ(read(ready[0], &r, 1), 1);
  close(ready[0]);
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  EXPECT_EQ(namespacesOf(getpid()), 2) << "the child's handler removed its parent's namespaces";
}

TEST_F(KernelBackendTest, CleanupRemovesWhatKill9Left) {
  const pid_t child = fork();
  if (child == 0) {
    NetnsFabric fabric(2, {FabricEdge{0, 1, LinkSpec{}, LinkSpec{}}});
    pause();
    _exit(0);
  }
  for (int i = 0; i < 100 && namespacesOf(child) < 2; ++i) usleep(50000);
  ASSERT_EQ(namespacesOf(child), 2);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(namespacesOf(child), 2) << "kill -9 cannot be caught: the namespaces stay";
  const auto removed = cleanupNamespaces(false);
  EXPECT_EQ(namespacesOf(child), 0);
  EXPECT_GE(removed.size(), 2u);
}

// tc-dev's leftovers after kill -9: `emulator cleanup` deletes the qdisc a dead shaper left and
// says so; where the interface went with its namespace, it drops the record and says nothing was
// removed (it used to list such an interface as removed).
TEST_F(KernelBackendTest, DeviceCleanupReportsOnlyWhatItRemoved) {
  // A child that shapes a veth in a namespace of its own, then is killed.
  auto shapeAndDie = [](std::string* ns) {
    int ready[2];
    if (pipe(ready) != 0) return pid_t{-1};
    const pid_t child = fork();
    if (child == 0) {
      close(ready[0]);
      const std::string name = "slowpipe-" + std::to_string(getpid()) + "-shaped";
      std::string ok = "no";
      if (runCommand({"ip", "netns", "add", name}).status == 0 &&
          runCommand(
              {"ip", "-n", name, "link", "add", "sp0", "type", "veth", "peer", "name", "sp1"})
                  .status == 0 &&
          runCommand({"ip", "-n", name, "link", "set", "sp0", "up"}).status == 0) {
        const int fd = open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && setns(fd, CLONE_NEWNET) == 0) {
          static DeviceShaper* shaper =
              new DeviceShaper("sp0");  // never destroyed: the kill leaves it
          (void)shaper;
          ok = "ok";
        }
      }
      (void)!write(ready[1], ok.data(), ok.size());
      pause();
      _exit(0);
    }
    close(ready[1]);
    char buf[2] = {};
    const bool ok = read(ready[0], buf, 2) == 2 && std::string(buf, 2) == "ok";
    close(ready[0]);
    *ns = "slowpipe-" + std::to_string(child) + "-shaped";
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return ok ? child : pid_t{-1};
  };
  auto htbOn = [](const std::string& ns) {
    return runCommand({"tc", "-n", ns, "qdisc", "show", "dev", "sp0"}).output.find("htb") !=
           std::string::npos;
  };
  auto listed = [](const std::vector<std::string>& v, const std::string& ns) {
    return std::find(v.begin(), v.end(), "sp0 (" + ns + ")") != v.end();
  };
  std::string ns;
  ASSERT_GT(shapeAndDie(&ns), 0) << "the child could not shape its veth";
  ASSERT_TRUE(htbOn(ns)) << "kill -9 left no qdisc to clean";
  const auto removed = cleanupDeviceShaping();
  EXPECT_TRUE(listed(removed, ns)) << "the qdisc it deleted is not reported";
  EXPECT_FALSE(htbOn(ns)) << "cleanup left the qdisc";
  runCommand({"ip", "netns", "delete", ns});

  std::string gone;
  const pid_t second = shapeAndDie(&gone);
  ASSERT_GT(second, 0);
  runCommand({"ip", "netns", "delete", gone});  // as namespace cleanup does first
  EXPECT_FALSE(listed(cleanupDeviceShaping(), gone))
      << "an interface that no longer exists was reported removed";
  EXPECT_NE(access(("/run/slowpipe/tc-dev/" + std::to_string(second) + "-sp0.json").c_str(), F_OK),
            0)
      << "the stale record was kept";
}

TEST_F(KernelBackendTest, CleanupLeavesLiveOwnersAlone) {
  NetnsFabric fabric(2, {FabricEdge{0, 1, LinkSpec{}, LinkSpec{}}});
  const pid_t child = fork();
  if (child == 0) {
    // Another process's cleanup must not remove this live process's namespaces.
    _exit(cleanupNamespaces(false).empty() ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(namespacesOf(getpid()), 2);
  fabric.destroy();
}

}  // namespace
}  // namespace slowpipe::emulator
