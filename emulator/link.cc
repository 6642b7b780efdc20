// Unit parsing, traces, link specs and the arrival-time model.
#include "emulator/link.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "emulator/packet_link.h"

namespace slowpipe::emulator {
namespace {

// Splits "12.5Mbps" into 12.5 and "Mbps". Returns false if there is no leading number.
bool splitNumber(const std::string& text, double* value, std::string* unit) {
  const char* begin = text.c_str();
  char* end = nullptr;
  *value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(*value)) return false;
  *unit = std::string(end);
  unit->erase(0, unit->find_first_not_of(' '));
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

double parseBandwidth(const std::string& text, const std::string& field) {
  static const std::map<std::string, double> kUnits = {{"bps", 1},    {"bit", 1},    {"kbps", 1e3},
                                                       {"kbit", 1e3}, {"mbps", 1e6}, {"mbit", 1e6},
                                                       {"gbps", 1e9}, {"gbit", 1e9}};
  double v = 0;
  std::string unit;
  const auto it = splitNumber(text, &v, &unit) ? kUnits.find(lower(unit)) : kUnits.end();
  if (it == kUnits.end() || v <= 0) {
    throw std::invalid_argument(
        field + ": '" + text +
        "' is not a bandwidth; expected a positive number with a unit "
        "(bps, Kbps, Mbps, Gbps, Kbit, Mbit, Gbit), e.g. 100Mbps or 10Gbit");
  }
  return v * it->second;
}

double parseDuration(const std::string& text, const std::string& field) {
  static const std::map<std::string, double> kUnits = {
      {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"", 0}};
  double v = 0;
  std::string unit;
  const auto it = splitNumber(text, &v, &unit) ? kUnits.find(lower(unit)) : kUnits.end();
  // A bare number is only accepted for 0: "5" could mean seconds or milliseconds.
  if (it == kUnits.end() || v < 0 || (it->first.empty() && v != 0)) {
    throw std::invalid_argument(
        field + ": '" + text +
        "' is not a duration; expected a number >= 0 with a unit (s, ms, us, "
        "ns), e.g. 5ms or 250us");
  }
  return v * it->second;
}

std::string formatBandwidth(double bps) {
  char b[32];
  if (bps >= 1e9)
    std::snprintf(b, sizeof b, "%gGbps", bps / 1e9);
  else if (bps >= 1e6)
    std::snprintf(b, sizeof b, "%gMbps", bps / 1e6);
  else if (bps >= 1e3)
    std::snprintf(b, sizeof b, "%gKbps", bps / 1e3);
  else
    std::snprintf(b, sizeof b, "%gbps", bps);
  return b;
}

std::string formatDuration(double s) {
  char b[32];
  if (s == 0) return "0ms";
  if (s >= 1)
    std::snprintf(b, sizeof b, "%gs", s);
  else if (s >= 1e-3)
    std::snprintf(b, sizeof b, "%gms", s * 1e3);
  else
    std::snprintf(b, sizeof b, "%gus", s * 1e6);
  return b;
}

BandwidthTrace BandwidthTrace::parse(const std::string& text, const std::string& source) {
  BandwidthTrace t;
  t.source = source;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string when, rate, extra;
    if (!(fields >> when)) continue;
    const std::string where = source + ":" + std::to_string(no);
    if (!(fields >> rate) || (fields >> extra))
      throw std::invalid_argument(where + ": expected '<time> <rate>', e.g. '2.5 100Mbps', got '" +
                                  line + "'");
    // Trace times may be bare seconds ("2.5") or carry a unit ("2500ms").
    char* end = nullptr;
    double at = std::strtod(when.c_str(), &end);
    if (end == when.c_str() || *end != '\0') at = parseDuration(when, where + " time");
    if (at < 0) throw std::invalid_argument(where + ": time " + when + " is negative");
    if (!t.points_.empty() && at <= t.points_.back().first)
      throw std::invalid_argument(where + ": time " + when + " is not after the previous line's");
    t.points_.emplace_back(at, parseBandwidth(rate, where + " rate"));
  }
  if (t.points_.empty())
    throw std::invalid_argument(source + ": trace has no '<time> <rate>' lines");
  if (t.points_.front().first != 0.0)
    throw std::invalid_argument(source + ": the first line must be at time 0");
  return t;
}

BandwidthTrace BandwidthTrace::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("trace file '" + path + "' cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), path);
}

namespace {
constexpr double kFloorBps = 1e3;  // a window without capacity (HTB takes no rate of 0)
}

BandwidthTrace BandwidthTrace::parseMbps(const std::string& text, const std::string& source) {
  BandwidthTrace t;
  t.source = source;
  std::istringstream in(text);
  std::string line;
  double first = -1;
  for (int no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    double at = 0, mbps = 0;
    std::string extra;
    if (!(fields >> at)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      throw std::invalid_argument(source + ":" + std::to_string(no) +
                                  ": expected '<seconds> <Mbit/s>', got '" + line + "'");
    }
    if (!(fields >> mbps) || (fields >> extra) || mbps < 0 || !std::isfinite(at) ||
        !std::isfinite(mbps))
      throw std::invalid_argument(
          source + ":" + std::to_string(no) +
          ": expected '<seconds> <Mbit/s>' (two numbers, the rate >= 0), got '" + line + "'");
    if (first < 0) first = at;
    if (!t.points_.empty() && at - first <= t.points_.back().first)
      throw std::invalid_argument(source + ":" + std::to_string(no) + ": time " +
                                  std::to_string(at) + " is not after the previous line's");
    t.points_.emplace_back(at - first, std::max(mbps * 1e6, kFloorBps));
  }
  if (t.points_.empty())
    throw std::invalid_argument(source + ": trace has no '<seconds> <Mbit/s>' lines");
  return t;
}

BandwidthTrace BandwidthTrace::fromDeliveries(const std::vector<double>& deliveryMs, double windowS,
                                              int mtu, double horizonS, const std::string& source) {
  BandwidthTrace t;
  t.source = source;
  const double periodMs = deliveryMs.back(), windowMs = windowS * 1e3;
  const auto windows = static_cast<size_t>(std::ceil(periodMs / windowMs));
  std::vector<double> count(windows, 0);
  for (double ms : deliveryMs)
    count[std::min(windows - 1, static_cast<size_t>(ms / windowMs))] += 1;
  const double bitsPer = 8.0 * (mtu - 52);
  for (double base = 0; base < horizonS * 1e3; base += periodMs)
    for (size_t w = 0; w < windows; ++w) {
      const double start = base + static_cast<double>(w) * windowMs,
                   end = std::min(start + windowMs, base + periodMs);
      if (start >= horizonS * 1e3) break;
      const double rate = std::max(count[w] * bitsPer / ((end - start) * 1e-3), kFloorBps);
      if (t.points_.empty() || t.points_.back().second != rate)
        t.points_.emplace_back(start * 1e-3, rate);
    }
  return t;
}

BandwidthTrace BandwidthTrace::fromJson(const nlohmann::json& j, const std::string& where) {
  if (j.is_string()) return load(j.get<std::string>());
  BandwidthTrace t = fromObject(j, where);
  t.form = j.dump();
  return t;
}

BandwidthTrace BandwidthTrace::fromObject(const nlohmann::json& j, const std::string& where) {
  const char* form =
      ": expected a file path or {\"file\": PATH, \"format\": \"slowpipe\" | \"mbps\" | "
      "\"mahimahi\", "
      "\"window\": \"100ms\", \"mtu\": 1500, \"horizon\": \"1h\"}";
  if (!j.is_object() || !j.contains("file") || !j["file"].is_string())
    throw std::invalid_argument(where + form);
  for (const auto& [k, v] : j.items())
    if (k != "file" && k != "format" && k != "window" && k != "mtu" && k != "horizon")
      throw std::invalid_argument(where + "." + k +
                                  ": unknown field; expected file, format, window, mtu, horizon");
  const std::string path = j["file"], format = j.value("format", "slowpipe");
  auto text = [&] {
    std::ifstream f(path);
    if (!f) throw std::invalid_argument(where + ".file: trace file '" + path + "' cannot be read");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  if (format == "slowpipe") return parse(text(), path);
  if (format == "mbps") return parseMbps(text(), path);
  if (format != "mahimahi")
    throw std::invalid_argument(where + ".format: '" + format +
                                "'; expected slowpipe, mbps or mahimahi");
  auto duration = [&](const char* key, double dflt) {
    if (!j.contains(key)) return dflt;
    if (!j[key].is_string())
      throw std::invalid_argument(where + "." + key +
                                  ": expected a string with a unit, e.g. \"100ms\"");
    const double v = parseDuration(j[key].get<std::string>(), where + "." + key);
    if (v < 1e-3)
      throw std::invalid_argument(where + "." + key + ": " + j[key].dump() + " is below 1 ms");
    return v;
  };
  int mtu = 1500;
  if (j.contains("mtu")) {
    if (!j["mtu"].is_number_integer() || j["mtu"].get<int64_t>() < 576 ||
        j["mtu"].get<int64_t>() > 65535)
      throw std::invalid_argument(where + ".mtu: " + j["mtu"].dump() +
                                  " must be an integer in 576..65535");
    mtu = j["mtu"].get<int>();
  }
  return fromDeliveries(loadDeliveryTrace(path), duration("window", 0.1), mtu,
                        duration("horizon", 3600), path);
}

double BandwidthTrace::rateAt(double t) const {
  auto it = std::upper_bound(points_.begin(), points_.end(), std::make_pair(t, double(INFINITY)));
  return it == points_.begin() ? points_.front().second : std::prev(it)->second;
}

double BandwidthTrace::finishTime(double start, double bits) const {
  auto it =
      std::upper_bound(points_.begin(), points_.end(), std::make_pair(start, double(INFINITY)));
  size_t i = it == points_.begin() ? 0 : static_cast<size_t>(it - points_.begin()) - 1;
  double t = start;
  while (true) {
    const double rate = points_[i].second;
    const double segEnd = i + 1 < points_.size() ? points_[i + 1].first : INFINITY;
    const double can = (segEnd - t) * rate;
    if (can >= bits) return t + bits / rate;
    bits -= can;
    t = segEnd;
    ++i;
  }
}

GilbertElliott gilbertElliottFromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object())
    throw std::invalid_argument(
        where +
        ": expected {\"p\": P, \"r\": R, \"loss_good\": LG, \"loss_bad\": LB} (Gilbert-Elliott)");
  GilbertElliott ge;
  for (const auto& [k, v] : j.items()) {
    const std::string f = where + "." + k;
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1)
      throw std::invalid_argument(f + ": " + v.dump() + " must be a probability in [0, 1]");
    const double x = v.get<double>();
    if (k == "p")
      ge.p = x;
    else if (k == "r")
      ge.r = x;
    else if (k == "loss_good")
      ge.lossGood = x;
    else if (k == "loss_bad")
      ge.lossBad = x;
    else
      throw std::invalid_argument(
          f + ": unknown field; expected p, r, loss_good, loss_bad (Gilbert-Elliott)");
  }
  if (ge.r <= 0)
    throw std::invalid_argument(where + ".r: must be > 0 (else the bad state never ends)");
  if (ge.meanLoss() >= 1)
    throw std::invalid_argument(where + ": a mean loss of 1 delivers nothing");
  return ge;
}

nlohmann::json toJson(const GilbertElliott& ge) {
  return {{"p", ge.p}, {"r", ge.r}, {"loss_good", ge.lossGood}, {"loss_bad", ge.lossBad}};
}

std::vector<std::string> netemLossArgs(const LinkSpec& s) {
  auto pct = [](double x) { return std::to_string(x * 100) + "%"; };
  if (s.gilbertElliott)
    return {"loss", "gemodel", pct(s.ge.p), pct(s.ge.r), pct(s.ge.lossBad), pct(s.ge.lossGood)};
  return {"loss", pct(s.loss)};
}

std::string LinkSpec::describe() const {
  std::string s = trace.empty() ? formatBandwidth(bandwidthBps) : "trace " + trace.source;
  s += ", " + formatDuration(latencyS);
  if (jitterS > 0) s += " +-" + formatDuration(jitterS);
  if (gilbertElliott)
    s += ", GE loss " + std::to_string(loss) + " (mean burst " + std::to_string(1 / ge.r) + ")";
  else if (loss > 0)
    s += ", loss " + std::to_string(loss);
  if (mtu) s += ", mtu " + std::to_string(mtu);
  return s;
}

void to_json(nlohmann::json& j, const LinkSpec& s) {
  j = {{"bandwidth_bps", s.bandwidthBps},
       {"latency_s", s.latencyS},
       {"jitter_s", s.jitterS},
       {"loss", s.loss},
       {"queue_bytes", s.queueBytes}};
  if (s.gilbertElliott) j["loss"] = toJson(s.ge);
  if (s.mtu) j["mtu"] = s.mtu;
  if (!s.trace.empty())
    j["trace"] =
        s.trace.form.empty() ? nlohmann::json(s.trace.source) : nlohmann::json::parse(s.trace.form);
  if (!s.tcp.empty()) j["tcp"] = toJson(s.tcp);
}

namespace {

// A rate or a delay of a link: a string with its unit, or a number where the key names its unit
// (bandwidth_bps, latency_s, jitter_s).
double linkQuantity(const nlohmann::json& j, const char* key, bool bandwidth,
                    const std::string& where) {
  const auto& v = j.at(key);
  const std::string field = where + "." + key;
  // "bandwidth": 50 (what `--set network.links.bandwidth=50` makes) has no unit: 50 bit/s was
  // taken and the run sat silent. A bare number is accepted only where the key names its unit.
  const std::string k = key;
  if (v.is_number() && (k == "bandwidth" || k == "latency" || k == "jitter"))
    throw std::invalid_argument(
        field + ": " + v.dump() + " has no unit; write it with one, e.g. \"" + v.dump() +
        (bandwidth ? "Mbps\" (or bandwidth_bps: " : "ms\" (or " + k + "_s: ") + v.dump() +
        (bandwidth ? " for bit/s)" : " for seconds)"));
  if (v.is_number()) {
    if (v.get<double>() < 0 || (bandwidth && v.get<double>() == 0))
      throw std::invalid_argument(field + ": " + v.dump() + " must be " +
                                  (bandwidth ? "> 0" : ">= 0"));
    return v.get<double>();
  }
  if (!v.is_string())
    throw std::invalid_argument(field +
                                ": expected a string like \"100Mbps\" / \"5ms\" or a number");
  return bandwidth ? parseBandwidth(v.get<std::string>(), field)
                   : parseDuration(v.get<std::string>(), field);
}

// Values beyond any real link are typos (a unit slip), not experiments: refused with the value as
// written.
double boundedQuantity(const nlohmann::json& j, const char* key, bool bandwidth, double limit,
                       const char* what, const std::string& where) {
  const double v = linkQuantity(j, key, bandwidth, where);
  if (v > limit)
    throw std::invalid_argument(where + "." + key + ": " + j.at(key).dump() + " is beyond " + what);
  return v;
}

// A link's loss: a probability per message, or Gilbert-Elliott's bursts.
void lossFromJson(const nlohmann::json& loss, const std::string& where, LinkSpec& s) {
  if (loss.is_object()) {
    s.gilbertElliott = true;
    s.ge = gilbertElliottFromJson(loss, where);
    s.loss = s.ge.meanLoss();
    return;
  }
  if (!loss.is_number() || loss.get<double>() < 0 || loss.get<double>() >= 1)
    throw std::invalid_argument(where + ": " + loss.dump() +
                                " must be a number in [0, 1) or {\"p\", \"r\", \"loss_good\", "
                                "\"loss_bad\"} (Gilbert-Elliott)");
  s.loss = loss.get<double>();
}

}  // namespace

LinkSpec linkSpecFromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object())
    throw std::invalid_argument(
        where + ": expected an object like {\"bandwidth\": \"1Gbps\", \"latency\": \"5ms\"}");
  static const std::vector<std::string> kKeys = {
      "bandwidth", "latency",       "jitter",    "loss",     "queue_bytes", "trace",
      "mtu",       "bandwidth_bps", "latency_s", "jitter_s", "tcp"};
  for (const auto& [k, v] : j.items())
    if (std::find(kKeys.begin(), kKeys.end(), k) == kKeys.end())
      throw std::invalid_argument(
          where + "." + k +
          ": unknown field; expected bandwidth, latency, jitter, loss, queue_bytes, trace, mtu");
  LinkSpec s;
  auto bounded = [&](const char* key, bool bandwidth, double limit, const char* what) {
    return boundedQuantity(j, key, bandwidth, limit, what, where);
  };
  constexpr double kMaxBps = 1e12, kMaxDelayS = 3600;
  if (j.contains("bandwidth"))
    s.bandwidthBps = bounded("bandwidth", true, kMaxBps, "1 Tbps, the largest bandwidth accepted");
  if (j.contains("bandwidth_bps"))
    s.bandwidthBps =
        bounded("bandwidth_bps", true, kMaxBps, "1 Tbps, the largest bandwidth accepted");
  if (j.contains("latency"))
    s.latencyS = bounded("latency", false, kMaxDelayS, "1 h, the largest latency accepted");
  if (j.contains("latency_s"))
    s.latencyS = bounded("latency_s", false, kMaxDelayS, "1 h, the largest latency accepted");
  if (j.contains("jitter"))
    s.jitterS = bounded("jitter", false, kMaxDelayS, "1 h, the largest jitter accepted");
  if (j.contains("jitter_s"))
    s.jitterS = bounded("jitter_s", false, kMaxDelayS, "1 h, the largest jitter accepted");
  if (j.contains("loss")) lossFromJson(j["loss"], where + ".loss", s);
  if (j.contains("queue_bytes")) {
    if (!j["queue_bytes"].is_number_unsigned())
      throw std::invalid_argument(where + ".queue_bytes: expected a positive integer");
    s.queueBytes = j["queue_bytes"].get<uint64_t>();
  }
  if (j.contains("mtu")) {
    const auto& m = j["mtu"];
    if (!m.is_number_integer() || m.get<int64_t>() < 576 || m.get<int64_t>() > 65535)
      throw std::invalid_argument(where + ".mtu: " + m.dump() +
                                  " must be an integer number of bytes in 576..65535");
    s.mtu = m.get<int>();
  }
  if (j.contains("trace")) {
    s.trace = BandwidthTrace::fromJson(j["trace"], where + ".trace");
  }
  if (j.contains("tcp")) s.tcp = tcpSettingsFromJson(j["tcp"], where + ".tcp");
  return s;
}

const LinkSpec& Topology::link(int src, int dst) const {
  const auto it = overrides.find({src, dst});
  return it == overrides.end() ? defaultLink : it->second;
}

Topology topologyFromJson(const nlohmann::json& j, const std::string& where) {
  // A run's TCP settings are one for all its links (network.tcp), as the kernel's are one per
  // namespace; the link table copies them into each link.
  auto noTcp = [](const nlohmann::json& l, const std::string& at) {
    if (l.is_object() && l.contains("tcp"))
      throw std::invalid_argument(
          at + ".tcp: TCP settings are the run's, not a link's; set network.tcp");
  };
  noTcp(j, where);
  if (j.is_object() && j.contains("links") && j["links"].is_array())
    for (size_t i = 0; i < j["links"].size(); ++i)
      noTcp(j["links"][i], where + ".links[" + std::to_string(i) + "]");
  Topology t;
  nlohmann::json base = j;
  if (j.is_object() && j.contains("links")) base.erase("links");
  t.defaultLink = linkSpecFromJson(base, where);
  if (j.is_object() && j.contains("links")) {
    const auto& links = j.at("links");
    if (!links.is_array())
      throw std::invalid_argument(where + ".links: expected an array of {\"src\", \"dst\", ...}");
    for (size_t i = 0; i < links.size(); ++i) {
      const std::string w = where + ".links[" + std::to_string(i) + "]";
      nlohmann::json l = links[i];
      if (!l.is_object() || !l.contains("src") || !l.contains("dst") ||
          !l["src"].is_number_integer() || !l["dst"].is_number_integer())
        throw std::invalid_argument(w + ": expected integer fields src and dst");
      const int src = l["src"], dst = l["dst"];
      l.erase("src");
      l.erase("dst");
      nlohmann::json merged = base;
      for (const auto& [k, v] : l.items()) merged[k] = v;
      t.overrides[{src, dst}] = linkSpecFromJson(merged, w);
    }
  }
  return t;
}

nlohmann::json tcpBimodalLinks(const Topology& t, const std::string& cc) {
  nlohmann::json flagged = nlohmann::json::array();
  auto check = [&](const std::string& name, const LinkSpec& l) {
    nlohmann::json b = tcpBimodality(cc, 2 * l.latencyS);
    if (b.is_null()) return;
    b["link"] = name;
    b["rtt_ms"] = 2000 * l.latencyS;
    flagged.push_back(b);
  };
  check("default", t.defaultLink);
  for (const auto& [pair, l] : t.overrides)
    check(std::to_string(pair.first) + "->" + std::to_string(pair.second), l);
  return flagged;
}

void to_json(nlohmann::json& j, const Topology& t) {
  j = t.defaultLink;
  if (!t.overrides.empty()) {
    j["links"] = nlohmann::json::array();
    for (const auto& [k, v] : t.overrides) {
      nlohmann::json l = v;
      l["src"] = k.first;
      l["dst"] = k.second;
      j["links"].push_back(l);
    }
  }
}

LinkClock::LinkClock(LinkSpec spec, double startTime, uint64_t seed)
    : logDraws_(!linkDrawsDir().empty()),
      spec_(std::move(spec)),
      start_(startTime),
      linkFree_(startTime),
      rng_(seed) {}

std::string linkDrawsDir() {
  const char* dir = std::getenv("SLOWPIPE_LINK_DRAWS");
  return dir ? dir : "";
}

void writeLinkDraws(int fromRank, int toRank, const LinkClock& clock) {
  const std::string dir = linkDrawsDir();
  if (dir.empty() || clock.draws().bytes.empty()) return;
  const std::string path =
      dir + "/link-" + std::to_string(fromRank) + "-" + std::to_string(toRank) + ".json";
  std::ofstream out(path + ".part");
  out << nlohmann::json{{"from", fromRank},
                        {"to", toRank},
                        {"bytes", clock.draws().bytes},
                        {"delay_s", clock.draws().delayS}}
             .dump();
  out.close();
  if (!out || std::rename((path + ".part").c_str(), path.c_str()) != 0)
    throw std::runtime_error("SLOWPIPE_LINK_DRAWS: cannot write '" + path + "'");
}

bool LinkClock::lose() {
  if (!spec_.gilbertElliott) return spec_.loss > 0 && uniform() < spec_.loss;
  const bool lost = uniform() < (bad_ ? spec_.ge.lossBad : spec_.ge.lossGood);
  bad_ = bad_ ? !(uniform() < spec_.ge.r) : uniform() < spec_.ge.p;  // then the state moves
  return lost;
}

double LinkClock::send(double now, uint64_t bytes) {
  const double begin = std::max(now, linkFree_);
  const double bits = 8.0 * static_cast<double>(bytes);
  linkFree_ = spec_.trace.empty() ? begin + bits / spec_.bandwidthBps
                                  : start_ + spec_.trace.finishTime(begin - start_, bits);
  double delay = spec_.latencyS;
  if (spec_.jitterS > 0) {
    std::normal_distribution<double> d(0.0, spec_.jitterS);
    delay += std::clamp(d(rng_), -3 * spec_.jitterS, 3 * spec_.jitterS);
    delay = std::max(delay, 0.0);
  }
  if (lose()) delay += spec_.retransmitS;
  if (logDraws_) {
    draws_.bytes.push_back(bytes);
    draws_.delayS.push_back(delay);
  }
  lastArrival_ = std::max(linkFree_ + delay, lastArrival_);  // FIFO: never overtake
  return lastArrival_;
}

}  // namespace slowpipe::emulator
