// Nodes, their access links and the shared calendars (see nodes.h).
#include "emulator/nodes.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>

namespace slowpipe::emulator {

using nlohmann::json;

namespace {

constexpr uint64_t kMagic = 0x73706163636573ull;  // "spacces"
constexpr int kSlots = 48;  // busy intervals a calendar keeps (when full: the oldest if over, else
                            // the smallest gap closed)

// Busy intervals [s, e) of one access link, sorted and disjoint.
struct Calendar {
  uint32_t n = 0;
  double s[kSlots];
  double e[kSlots];
};

// The earliest start >= from at which `d` seconds are free; books them. `now`: the booking's send
// time (what ended before it is over for every later booking).
double book(Calendar& c, double from, double d, double now) {
  if (d <= 0) return from;
  double s = from;
  uint32_t i = 0;
  for (; i < c.n; ++i) {
    if (c.e[i] <= s) continue;
    if (c.s[i] >= s + d) break;
    s = c.e[i];
  }
  if (i > 0 && c.e[i - 1] == s) {  // back to back: extend the previous interval
    c.e[i - 1] = s + d;
    if (i < c.n && c.s[i] == c.e[i - 1]) {
      c.e[i - 1] = c.e[i];
      std::memmove(c.s + i, c.s + i + 1, (c.n - i - 1) * sizeof(double));
      std::memmove(c.e + i, c.e + i + 1, (c.n - i - 1) * sizeof(double));
      --c.n;
    }
    return s;
  }
  if (c.n ==
      kSlots) {  // full: forget the oldest interval if it is over, else close the smallest gap
    uint32_t k = 0;
    if (c.e[0] > now) {  // (never the gap the new interval goes into: the one before i)
      k = i == 1 ? 1 : 0;
      for (uint32_t j = 0; j + 1 < c.n; ++j)
        if (j + 1 != i && c.s[j + 1] - c.e[j] < c.s[k + 1] - c.e[k]) k = j;
      c.e[k] = c.e[k + 1];  // intervals k and k + 1 become one (the gap counts as busy)
      ++k;
    }
    std::memmove(c.s + k, c.s + k + 1, (c.n - k - 1) * sizeof(double));
    std::memmove(c.e + k, c.e + k + 1, (c.n - k - 1) * sizeof(double));
    --c.n;
    if (i > k) --i;
  }
  std::memmove(c.s + i + 1, c.s + i, (c.n - i) * sizeof(double));
  std::memmove(c.e + i + 1, c.e + i, (c.n - i) * sizeof(double));
  c.s[i] = s;
  c.e[i] = s + d;
  ++c.n;
  return s;
}

std::string nodeNames(const std::vector<NodeSpec>& nodes) {
  std::string out;
  for (size_t i = 0; i < nodes.size() && i < 12; ++i) out += (i ? ", " : "") + nodes[i].name;
  if (nodes.size() > 12) out += ", ... (" + std::to_string(nodes.size()) + " nodes)";
  return out;
}

double rateOf(const json& n, const char* key, const std::string& where) {
  if (!n.contains(key)) return 0;
  if (!n[key].is_string())
    throw std::invalid_argument(where + "." + key + ": expected a rate like \"100Mbps\"");
  return parseBandwidth(n[key].get<std::string>(), where + "." + key);
}

json readNetworkFile(const std::string& path, const std::string& where) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(where + ": cannot read the network file '" + path + "'");
  json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw std::invalid_argument(where + ": '" + path + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw std::invalid_argument(where + ": '" + path + "' does not hold a network object");
  j["file"] = path;
  return j;
}

std::vector<NodeSpec> nodesFromJson(const json& list, const std::string& where) {
  if (!list.is_array() || list.empty())
    throw std::invalid_argument(where +
                                ": expected a list of nodes [{\"name\", \"up\", \"down\"}, ...]");
  std::vector<NodeSpec> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& n = list[i];
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!n.is_object() || !n.contains("name") || !n["name"].is_string() ||
        n["name"].get<std::string>().empty())
      throw std::invalid_argument(w + ".name: expected a node's name");
    for (const auto& [k, v] : n.items())
      if (k != "name" && k != "region" && k != "up" && k != "down" && k != "count" && k != "notes")
        throw std::invalid_argument(
            w + "." + k + ": unknown field; expected name, region, up, down, count, notes");
    NodeSpec s;
    s.name = n["name"].get<std::string>();
    if (n.contains("region") &&
        (!n["region"].is_string() || n["region"].get<std::string>().empty()))
      throw std::invalid_argument(w + ".region: " + n["region"].dump() +
                                  "; expected a region's name");
    s.region = n.contains("region") ? n["region"].get<std::string>() : s.name;
    s.upBps = rateOf(n, "up", w);
    s.downBps = rateOf(n, "down", w);
    const json count = n.value("count", json(1));
    if (!count.is_number_integer() || count.get<int64_t>() < 1 || count.get<int64_t>() > 4096)
      throw std::invalid_argument(w + ".count: " + count.dump() +
                                  " must be an integer in 1..4096 (nodes alike, named <name>-<k>)");
    if (count.get<int>() == 1) {
      out.push_back(s);
      continue;
    }
    for (int k = 0; k < count.get<int>(); ++k) {
      NodeSpec c = s;
      c.name = s.name + "-" + std::to_string(k);
      out.push_back(c);
    }
  }
  std::map<std::string, int> seen;
  for (const auto& n : out)
    if (++seen[n.name] > 1)
      throw std::invalid_argument(where + ": node '" + n.name + "' is named twice");
  return out;
}

// A core pair or default: a LinkSpec and whether it names a rate.
LinkSpec coreLink(json j, const std::string& where, bool* rated) {
  for (const char* k : {"a", "b", "directed", "notes"}) j.erase(k);
  *rated = j.contains("bandwidth") || j.contains("bandwidth_bps") || j.contains("trace");
  return linkSpecFromJson(j, where);
}

// network.core.pairs: each pair of nodes or regions and its core link, its names checked against
// the nodes.
struct CorePair {
  std::string a, b;
  bool directed;
  LinkSpec link;
  bool rated;
};
std::vector<CorePair> corePairs(const json& core, const std::string& w,
                                const std::vector<NodeSpec>& nodes) {
  std::vector<CorePair> pairs;
  const json list = core.value("pairs", json::array());
  if (!list.is_array())
    throw std::invalid_argument(w +
                                ".core.pairs: expected a list of {\"a\", \"b\", \"latency\", ...}");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string pw = w + ".core.pairs[" + std::to_string(i) + "]";
    const json& p = list[i];
    for (const char* k : {"a", "b"}) {
      if (!p.is_object() || !p.contains(k) || !p[k].is_string())
        throw std::invalid_argument(pw + "." + k + ": expected a node's or a region's name");
      const std::string name = p[k].get<std::string>();
      if (std::none_of(nodes.begin(), nodes.end(),
                       [&](const NodeSpec& n) { return n.name == name || n.region == name; }))
        throw std::invalid_argument(pw + "." + k + ": '" + name +
                                    "' is neither a node nor a region; nodes: " + nodeNames(nodes));
    }
    CorePair q{p["a"].get<std::string>(),
               p["b"].get<std::string>(),
               p.value("directed", false),
               {},
               false};
    q.link = coreLink(p, pw, &q.rated);
    pairs.push_back(std::move(q));
  }
  return pairs;
}

}  // namespace

struct AccessLinks::Region {
  uint64_t magic;
  int32_t calendars;
  pthread_mutex_t mu;
  Calendar* cal() { return reinterpret_cast<Calendar*>(this + 1); }
};

json toJson(const AccessPath& p) {
  return {{"src_node", p.a},       {"dst_node", p.b},         {"up_bps", p.upBps},
          {"down_bps", p.downBps}, {"core_bps", p.coreBps},   {"latency_s", p.latencyS},
          {"up_slot", p.upSlot},   {"down_slot", p.downSlot}, {"core_slot", p.coreSlot}};
}

AccessPath accessPathFromJson(const json& j, const std::string& where) {
  AccessPath p;
  auto get = [&](const char* k, auto* out) {
    if (!j.contains(k) || !j[k].is_number())
      throw std::invalid_argument(where + "." + k + ": expected a number");
    *out = j[k].get<std::remove_pointer_t<decltype(out)>>();
  };
  if (!j.is_object()) throw std::invalid_argument(where + ": expected an access path object");
  get("src_node", &p.a);
  get("dst_node", &p.b);
  get("up_bps", &p.upBps);
  get("down_bps", &p.downBps);
  get("core_bps", &p.coreBps);
  get("latency_s", &p.latencyS);
  get("up_slot", &p.upSlot);
  get("down_slot", &p.downSlot);
  get("core_slot", &p.coreSlot);
  return p;
}

NodeNetwork NodeNetwork::fromJson(const json& given, const std::string& where) {
  NodeNetwork net;
  net.json_ = given.is_string() ? readNetworkFile(given.get<std::string>(), where) : given;
  const json& j = net.json_;
  const std::string w =
      j.contains("file") ? where + " ('" + j["file"].get<std::string>() + "')" : where;
  if (!j.is_object())
    throw std::invalid_argument(
        where + ": expected a network {\"nodes\": [...], \"core\": {...}} or a file holding one");
  for (const auto& [k, v] : j.items())
    if (k != "name" && k != "source" && k != "notes" && k != "file" && k != "nodes" &&
        k != "core" && k != "local")
      throw std::invalid_argument(
          w + "." + k + ": unknown field; expected name, source, notes, nodes, core, local");
  net.name =
      j.value("name", j.contains("file") ? j["file"].get<std::string>() : std::string("inline"));
  net.nodes_ = nodesFromJson(j.value("nodes", json()), w + ".nodes");
  bool rated = false;
  net.local_ = j.contains("local") ? coreLink(j["local"], w + ".local", &rated) : LinkSpec{};
  if (!j.contains("local")) net.local_.bandwidthBps = 100e9;
  const json core = j.value("core", json::object());
  if (!core.is_object())
    throw std::invalid_argument(w + ".core: expected {\"default\", \"same_region\", \"pairs\"}");
  for (const auto& [k, v] : core.items())
    if (k != "default" && k != "same_region" && k != "pairs" && k != "notes")
      throw std::invalid_argument(w + ".core." + k +
                                  ": unknown field; expected default, same_region, pairs");
  bool defaultRated = false, sameRated = false;
  const LinkSpec def = core.contains("default")
                           ? coreLink(core["default"], w + ".core.default", &defaultRated)
                           : LinkSpec{};
  const bool hasSame = core.contains("same_region");
  const LinkSpec same =
      hasSame ? coreLink(core["same_region"], w + ".core.same_region", &sameRated) : LinkSpec{};
  const std::vector<CorePair> pairs = corePairs(core, w, net.nodes_);
  const int N = net.size();
  net.core_.assign(static_cast<size_t>(N) * N, Core{});
  auto score = [](const NodeSpec& n, const std::string& name) {
    return n.name == name ? 2 : n.region == name ? 1 : 0;
  };
  for (int a = 0; a < N; ++a)
    for (int b = 0; b < N; ++b) {
      if (a == b) continue;
      Core& c = net.core_[static_cast<size_t>(a) * N + b];
      const NodeSpec &na = net.nodes_[a], &nb = net.nodes_[b];
      int best = 0;
      for (const auto& p : pairs) {
        int s = score(na, p.a) && score(nb, p.b) ? score(na, p.a) + score(nb, p.b) : 0;
        if (!p.directed && score(na, p.b) && score(nb, p.a))
          s = std::max(s, score(na, p.b) + score(nb, p.a));
        if (s > best) {
          best = s;
          c.link = p.link;
          c.rated = p.rated;
        }
      }
      if (best == 0) {
        const bool inRegion = hasSame && na.region == nb.region;
        c.link = inRegion ? same : def;
        c.rated = inRegion ? sameRated : defaultRated;
      }
      if (c.rated) c.slot = 2 * N + net.ratedCores_++;
    }
  return net;
}

int NodeNetwork::index(const json& v, const std::string& where) const {
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0 || i >= size())
      throw std::invalid_argument(where + ": node " + v.dump() + " is outside the network's " +
                                  std::to_string(size()) + " nodes");
    return static_cast<int>(i);
  }
  if (v.is_string())
    for (int i = 0; i < size(); ++i)
      if (nodes_[i].name == v.get<std::string>()) return i;
  throw std::invalid_argument(where + ": " + v.dump() + " is not a node of network '" + name +
                              "'; expected a name (" + nodeNames(nodes_) + ") or an index");
}

LinkSpec NodeNetwork::path(int a, int b) const {
  if (a == b) return local_;
  const Core& c = core_.at(static_cast<size_t>(a) * size() + b);
  LinkSpec s = c.link;
  double rate = c.rated ? c.link.bandwidthBps : std::numeric_limits<double>::infinity();
  if (nodes_[a].upBps > 0) rate = std::min(rate, nodes_[a].upBps);
  if (nodes_[b].downBps > 0) rate = std::min(rate, nodes_[b].downBps);
  if (!std::isfinite(rate))
    throw std::invalid_argument("network.nodes: nothing limits the rate from node '" +
                                nodes_[a].name + "' to '" + nodes_[b].name +
                                "', which the run's ranks use: give the nodes up / down rates or "
                                "the core pair a bandwidth");
  s.bandwidthBps = rate;
  return s;
}

AccessPath NodeNetwork::access(int a, int b) const {
  AccessPath p;
  if (a == b) return p;
  const Core& c = core_.at(static_cast<size_t>(a) * size() + b);
  p.a = a;
  p.b = b;
  p.latencyS = c.link.latencyS;
  if (nodes_[a].upBps > 0) {
    p.upBps = nodes_[a].upBps;
    p.upSlot = a;
  }
  if (nodes_[b].downBps > 0) {
    p.downBps = nodes_[b].downBps;
    p.downSlot = size() + b;
  }
  if (c.rated) {
    p.coreBps = c.link.bandwidthBps;
    p.coreSlot = c.slot;
  }
  return p;
}

AccessLinks::AccessLinks(int calendars) {
  bytes_ = sizeof(Region) + static_cast<size_t>(calendars) * sizeof(Calendar);
  region_ = static_cast<Region*>(std::calloc(1, bytes_));
  if (!region_) throw std::bad_alloc();
  region_->magic = kMagic;
  region_->calendars = calendars;
  pthread_mutex_init(&region_->mu, nullptr);
}

int AccessLinks::createShared(int calendars) {
  const size_t bytes = sizeof(Region) + static_cast<size_t>(calendars) * sizeof(Calendar);
  const int fd =
      memfd_create("slowpipe-access-links", 0);  // no MFD_CLOEXEC: the workers inherit it
  if (fd < 0)
    throw std::runtime_error(std::string("network.nodes: memfd_create failed: ") +
                             std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    throw std::runtime_error(
        std::string("network.nodes: sizing the access links' shared memory failed: ") +
        std::strerror(errno));
  }
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    throw std::runtime_error(std::string("network.nodes: mapping the access links failed: ") +
                             std::strerror(errno));
  }
  auto* r = static_cast<Region*>(m);
  r->calendars = calendars;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(
      &attr, PTHREAD_MUTEX_ROBUST);  // a worker killed while booking does not hang the others
  pthread_mutex_init(&r->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  r->magic = kMagic;
  munmap(m, bytes);
  return fd;
}

AccessLinks AccessLinks::attach(int fd) {
  Region head{};
  if (pread(fd, &head, sizeof head, 0) != static_cast<ssize_t>(sizeof head) ||
      head.magic != kMagic || head.calendars < 0)
    throw std::runtime_error("network.nodes: descriptor " + std::to_string(fd) +
                             " does not hold the run's access links");
  AccessLinks a;
  a.bytes_ = sizeof(Region) + static_cast<size_t>(head.calendars) * sizeof(Calendar);
  void* m = mmap(nullptr, a.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    throw std::runtime_error(std::string("network.nodes: mapping the access links failed: ") +
                             std::strerror(errno));
  a.region_ = static_cast<Region*>(m);
  a.mapped_ = true;
  return a;
}

AccessLinks::AccessLinks(AccessLinks&& o) noexcept
    : region_(o.region_), bytes_(o.bytes_), mapped_(o.mapped_) {
  o.region_ = nullptr;
}

AccessLinks::~AccessLinks() {
  if (!region_) return;
  if (mapped_)
    munmap(region_, bytes_);
  else
    std::free(region_);
}

double AccessLinks::send(const AccessPath& p, double t, uint64_t bytes) {
  if (!p.active()) return t;
  for (const int slot : {p.upSlot, p.downSlot, p.coreSlot})
    if (slot >= region_->calendars)
      throw std::out_of_range("network.nodes: access calendar " + std::to_string(slot) + " of " +
                              std::to_string(region_->calendars));
  const double bits = 8.0 * static_cast<double>(bytes);
  if (const int rc = pthread_mutex_lock(&region_->mu); rc == EOWNERDEAD)
    pthread_mutex_consistent(&region_->mu);
  Calendar* cal = region_->cal();
  const double d1 = p.upSlot >= 0 ? bits / p.upBps : 0;
  const double s1 = p.upSlot >= 0 ? book(cal[p.upSlot], t, d1, t) : t;
  const double f1 = s1 + d1;
  double s2 = s1, f2 = f1;
  if (p.coreSlot >= 0) {
    const double d2 = bits / p.coreBps;
    s2 = book(cal[p.coreSlot], s1, d2, t);
    f2 = std::max(f1, s2 + d2);
  }
  const double d3 = p.downSlot >= 0 ? bits / p.downBps : 0;
  const double s3 =
      p.downSlot >= 0 ? book(cal[p.downSlot], s2 + p.latencyS, d3, t) : s2 + p.latencyS;
  const double f3 = std::max(f2 + p.latencyS, s3 + d3);
  pthread_mutex_unlock(&region_->mu);
  return f3;
}

AccessLinks& processAccessLinks() {
  static AccessLinks* links = [] {
    const char* v = std::getenv(kAccessFdEnv);
    if (!v || !*v)
      throw std::runtime_error(
          std::string("network.nodes: this worker has no shared access links (") + kAccessFdEnv +
          " is not set); access links are emulated for workers the local launcher starts");
    return new AccessLinks(AccessLinks::attach(std::atoi(v)));
  }();
  return *links;
}

}  // namespace slowpipe::emulator
