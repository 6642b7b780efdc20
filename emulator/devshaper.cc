// DeviceShaper: tc on a real interface, per destination (see devshaper.h).
#include "emulator/devshaper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "emulator/command.h"
#include "emulator/live_names.h"
#include "emulator/netns.h"

namespace slowpipe::emulator {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kRegistryDir = "/run/slowpipe/tc-dev";

LiveNames<16> gLive;  // what the signal handler removes

void deleteRootFromSignal(const char* dev) {
  const char* argv[] = {"tc", "qdisc", "del", "dev", dev, "root", nullptr};
  runFromSignal(argv, true);
}

void installHandlers() { addSignalCleanup(removeAllDeviceShaping); }

void registerLive(const std::string& name) { gLive.add(name, "shaped interfaces"); }
void unregisterLive(const std::string& name) { gLive.remove(name); }

std::string bitRate(double bps) { return std::to_string(static_cast<uint64_t>(bps)) + "bit"; }

void run(const std::vector<std::string>& cmd, const std::string& what) {
  const CommandResult r = runCommand(cmd);
  if (r.status != 0) {
    std::string line;
    for (const auto& a : cmd) line += (line.empty() ? "" : " ") + a;
    throw std::runtime_error("tc-dev: " + what + " failed (" + line + "): " + r.output);
  }
}

bool alive(long pid) {
  return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

std::string interfaceWithAddress(const std::string& address) {
  const CommandResult r = runCommand({"ip", "-o", "-4", "addr", "show"});
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string index, name, family, cidr;
    f >> index >> name >> family >> cidr;
    if (family == "inet" && cidr.substr(0, cidr.find('/')) == address)
      return name.substr(0, name.find('@'));
  }
  throw std::invalid_argument("network.dev auto: no interface of this host holds address " +
                              address + " (name the interface with network.dev)");
}

DeviceShaper::DeviceShaper(const std::string& dev, int mtu) : dev_(dev), mtu_(mtu) {
  if (geteuid() != 0)
    throw std::runtime_error("tc-dev: not root; shaping an interface needs CAP_NET_ADMIN");
  if (dev.empty() || dev.size() >= 60)
    throw std::invalid_argument("network.dev: '" + dev + "' is not an interface name");
  const KernelFeatures& f = kernelFeatures();
  if (!f.htb) throw std::runtime_error("tc-dev: this kernel has no HTB qdisc (sch_htb)");
  netem_ = f.netem;
  // Only the kernel's default root qdisc (handle 0:, or none) is taken over, never someone's own.
  const CommandResult shown = runCommand({"tc", "qdisc", "show", "dev", dev, "root"});
  if (shown.status != 0)
    throw std::invalid_argument("network.dev: no interface '" + dev + "' here: " + shown.output);
  if (!shown.output.empty() && shown.output.find(" 0: ") == std::string::npos &&
      shown.output.find("noqueue") == std::string::npos)
    throw std::runtime_error("tc-dev: " + dev + " already has a root qdisc of its own (" +
                             shown.output.substr(0, shown.output.find('\n')) +
                             "); remove it (tc qdisc del dev " + dev +
                             " root) or shape another interface");
  installHandlers();
  registerLive(dev);
  try {
    fs::create_directories(kRegistryDir);
    registry_ = std::string(kRegistryDir) + "/" + std::to_string(getpid()) + "-" + dev + ".json";
    std::string ns = runCommand({"ip", "netns", "identify", std::to_string(getpid())}).output;
    while (!ns.empty() && std::isspace(static_cast<unsigned char>(ns.back()))) ns.pop_back();
    std::ofstream(registry_) << json{{"pid", getpid()}, {"dev", dev}, {"netns", ns}}.dump() << "\n";
    run({"tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"},
        "add htb");
    run({"tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate",
         "100gbit"},
        "add default class");
  } catch (...) {
    remove();
    throw;
  }
}

DeviceShaper::~DeviceShaper() { remove(); }

void DeviceShaper::addDestination(const std::string& ip, int port, const LinkSpec& link) {
  if (link.loss > 0 && !netem_)
    throw std::invalid_argument("network.links.loss: " + std::to_string(link.loss) +
                                " needs netem to drop packets on tc-dev, and "
                                "this kernel has no netem qdisc; use backend 'user'");
  if (!link.trace.empty())
    throw std::invalid_argument("tc-dev: bandwidth traces are not applied on real interfaces yet");
  const int id = nextClass_++;
  const std::string classid = "1:" + std::to_string(id);
  const double rate = wireRateFor(link.bandwidthBps, mtu_);
  const uint64_t burst =
      std::max<uint64_t>(static_cast<uint64_t>(rate / 8 * 1e-3), 2ull * (mtu_ + 14));
  run({"tc", "class", "add", "dev", dev_, "parent", "1:", "classid", classid, "htb", "rate",
       bitRate(rate), "ceil", bitRate(rate), "burst", std::to_string(burst), "cburst",
       std::to_string(burst)},
      "add class for " + ip + ":" + std::to_string(port));
  if (netem_ && (link.latencyS > 0 || link.jitterS > 0 || link.loss > 0)) {
    std::vector<std::string> cmd = {
        "tc",
        "qdisc",
        "add",
        "dev",
        dev_,
        "parent",
        classid,
        "handle",
        std::to_string(id) + ":",
        "netem",
        "limit",
        "100000",
        "delay",
        std::to_string(static_cast<int64_t>(link.latencyS * 1e6)) + "us"};
    if (link.jitterS > 0)
      cmd.push_back(std::to_string(static_cast<int64_t>(link.jitterS * 1e6)) + "us");
    if (link.loss > 0) {
      const auto args = netemLossArgs(link);
      cmd.insert(cmd.end(), args.begin(), args.end());
    }
    run(cmd, "add netem");
  }
  run({"tc",       "filter", "add",      "dev",   dev_,
       "parent",   "1:",     "protocol", "ip",    "prio",
       "1",        "u32",    "match",    "ip",    "dst",
       ip + "/32", "match",  "ip",       "dport", std::to_string(port),
       "0xffff",   "flowid", classid},
      "add filter for " + ip + ":" + std::to_string(port));
}

json DeviceShaper::mechanism() const {
  return {{"rate", "htb on " + dev_ + " per destination"},
          {"delay", netem_ ? "netem" : "user-space"},
          {"jitter", netem_ ? "netem" : "user-space"},
          {"loss", netem_ ? "netem" : "refused (no netem)"}};
}

void DeviceShaper::remove() {
  if (removed_) return;
  removed_ = true;
  runCommand({"tc", "qdisc", "del", "dev", dev_, "root"});
  unregisterLive(dev_);
  if (!registry_.empty()) fs::remove(registry_);
}

void removeAllDeviceShaping() { gLive.forEach(deleteRootFromSignal); }

std::vector<std::string> cleanupDeviceShaping() {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::exists(kRegistryDir, ec)) return removed;
  for (const auto& e : fs::directory_iterator(kRegistryDir, ec)) {
    json j;
    try {
      j = json::parse(std::ifstream(e.path()));
    } catch (const std::exception&) {
      continue;
    }
    if (alive(j.value("pid", 0L))) continue;
    const std::string dev = j.value("dev", ""), ns = j.value("netns", "");
    std::vector<std::string> cmd = {"tc"};
    if (!ns.empty()) cmd.insert(cmd.end(), {"-n", ns});
    cmd.insert(cmd.end(), {"qdisc", "del", "dev", dev, "root"});
    // Said removed only if it was: an interface gone with its namespace left only the record.
    const bool deleted = !dev.empty() && runCommand(cmd).status == 0;
    fs::remove(e.path(), ec);
    if (deleted) removed.push_back(dev + (ns.empty() ? "" : " (" + ns + ")"));
  }
  return removed;
}

}  // namespace slowpipe::emulator
