// `slowpipe bench link`: calibrate a shaped link (user or tc backend), one point or the sweep.
// `slowpipe emulator cleanup|probe`: remove leftovers of killed runs; show what the kernel offers.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "emulator/calibrate.h"
#include "emulator/delay_line.h"
#include "emulator/delay_line_probes.h"
#include "emulator/devshaper.h"
#include "emulator/netns.h"
#include "runtime/records/result.h"
#include "tools/commands.h"

namespace slowpipe::tools {
namespace {

using nlohmann::json;

struct LinkBenchOptions {
  std::string backend = "user", bandwidth = "1Gbps", latency = "0ms", jitter = "0ms", trace;
  uint64_t messageBytes = 1u << 20;
  int messages = 0;
  bool json = false, sweep = false, iperf = false;
};

void printPoint(const json& p) {
  auto ms = [](const json& v) { return v.is_number() ? v.get<double>() * 1e3 : NAN; };
  const std::string iperf =
      p.contains("iperf3_bps") ? emulator::formatBandwidth(p["iperf3_bps"]) : "-";
  std::printf("%-5s %12s %12s %8.2f%% %10.3f %10.3f %10.3f %8.3f %12s  %s\n",
              p["backend"].get<std::string>().c_str(),
              emulator::formatBandwidth(p["configured_bps"]).c_str(),
              emulator::formatBandwidth(p["achieved_bps"]).c_str(),
              100 * p["rate_error"].get<double>(), ms(p["latency_configured_s"]),
              ms(p["latency_median_s"]), ms(p["latency_p99_s"]), ms(p["latency_error_s"]),
              iperf.c_str(), p.contains("note") ? p["note"].get<std::string>().c_str() : "");
}

json runPoint(const LinkBenchOptions& o, const std::string& bw, const std::string& lat,
              double ceiling) {
  emulator::CalibrationOptions c;
  c.backend = o.backend;
  c.link.bandwidthBps = emulator::parseBandwidth(bw, "--bandwidth");
  c.link.latencyS = emulator::parseDuration(lat, "--latency");
  c.link.jitterS = emulator::parseDuration(o.jitter, "--jitter");
  if (!o.trace.empty()) c.link.trace = emulator::BandwidthTrace::load(o.trace);
  c.messageBytes = o.messageBytes;
  c.messages = o.messages;
  c.iperf = o.iperf;
  json p = emulator::calibrateLink(c);
  if (o.backend == "user" && ceiling > 0) {
    p["loopback_ceiling_bps"] = ceiling;
    if (c.link.bandwidthBps > 0.9 * ceiling)
      p["note"] = "configured rate is above 90% of what ZeroMQ loopback carries here (" +
                  emulator::formatBandwidth(ceiling) +
                  "): the machine, not the emulator, limits it";
  }
  return p;
}

void run(const LinkBenchOptions& o) {
  const double ceiling =
      o.backend == "user" ? emulator::loopbackCeilingBps(o.messageBytes, 200) : 0;
  std::vector<std::pair<std::string, std::string>> points;
  if (o.sweep) {
    for (const char* lat : {"0ms", "10ms"})
      for (const char* bw : {"100Mbps", "500Mbps", "1Gbps", "10Gbps"}) points.emplace_back(bw, lat);
  } else {
    points.emplace_back(o.bandwidth, o.latency);
  }
  if (!o.json)
    std::printf("%-5s %12s %12s %9s %10s %10s %10s %8s %12s\n", "back", "configured", "achieved",
                "rate err", "lat ms", "med ms", "p99 ms", "err ms", "iperf3");
  json all = json::array();
  for (const auto& [bw, lat] : points) {
    json p = runPoint(o, bw, lat, ceiling);
    if (!o.json) printPoint(p);
    all.push_back(p);
  }
  if (!o.json && o.backend == "tc")
    std::printf("mechanism: %s\n", all.back()["mechanism"].dump().c_str());
  if (!o.json) {
    double steal = 0;
    for (const auto& p : all) steal = std::max(steal, p.value("host_cpu_steal", 0.0));
    std::printf("hypervisor steal during a point, at most: %.1f%% of this machine's CPU%s\n",
                100 * steal,
                steal > emulator::kStealNoticeable
                    ? " (past 3%: rates and delays above are partly the host's)"
                    : "");
  }
  if (!o.json && ceiling > 0)
    std::printf("ZeroMQ TCP loopback ceiling here: %s\n",
                emulator::formatBandwidth(ceiling).c_str());
  if (o.json)
    std::cout
        << (o.sweep ? json{{"points", all}, {"loopback_ceiling_bps", ceiling}} : all[0]).dump(2)
        << std::endl;
}

}  // namespace

void addBenchLink(CLI::App& bench) {
  auto o = std::make_shared<LinkBenchOptions>();
  auto* cmd = bench.add_subcommand("link", "calibrate a shaped link: achieved goodput and latency");
  cmd->add_option("--backend", o->backend, "user (no privileges) or tc (root: netns + veth + tc)")
      ->check(CLI::IsMember({"user", "tc"}))
      ->capture_default_str();
  cmd->add_option("--bandwidth", o->bandwidth, "e.g. 100Mbps, 1Gbps, 10Gbit")
      ->capture_default_str();
  cmd->add_option("--latency", o->latency, "one-way latency, e.g. 5ms, 250us")
      ->capture_default_str();
  cmd->add_option("--jitter", o->jitter, "latency standard deviation")->capture_default_str();
  cmd->add_option("--message-bytes", o->messageBytes, "bytes per message")->capture_default_str();
  cmd->add_option("--messages", o->messages, "bulk messages (0: ~2 s worth)")
      ->capture_default_str();
  cmd->add_option("--trace", o->trace, "bandwidth trace file: '<time s> <rate>' per line");
  cmd->add_flag("--sweep", o->sweep, "100Mbps, 500Mbps, 1Gbps, 10Gbps at 0 and 10 ms");
  cmd->add_flag("--iperf", o->iperf, "tc backend: cross-check with iperf3 in the same namespaces");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->callback([o] { run(*o); });
}

// --moderation-us: the line's interrupt moderation (DelayLineOptions::batchS; 0, the default:
// none); -1 as network.moderation_us "auto" (moderationFor the shorter direction's delay).
void addModerationOption(CLI::App* cmd, double& us) {
  cmd->add_option("--moderation-us", us,
                  "write streaming packets in batches at most this many us apart "
                  "(0: none; -1: auto, a fiftieth of the delay, at most 100 us)")
      ->check(CLI::Range(-1.0, 10000.0))
      ->capture_default_str();
}

// `slowpipe emulator delayline`: the delay line alone (emulator/delay_line.h), both directions
// alike.
void addDelayLineCommand(CLI::App& emu) {
  auto link = std::make_shared<json>(json::object());
  auto probe = std::make_shared<emulator::DelayLineProbe>();
  auto text = std::make_shared<std::map<std::string, std::string>>();
  auto loss = std::make_shared<double>(0.0);
  auto ge = std::make_shared<std::vector<double>>();
  auto queuePackets = std::make_shared<uint64_t>(0), queueBytes = std::make_shared<uint64_t>(0);
  auto mtu = std::make_shared<int>(1500);
  auto reorder = std::make_shared<bool>(false);
  auto* cmd =
      emu.add_subcommand("delayline",
                         "two namespaces joined by the packet-level delay line (TUN, no netem): "
                         "UDP round trips and an iperf3 TCP stream through it (root)");
  for (const char* k : {"rate", "delay", "jitter", "trace"})
    cmd->add_option(std::string("--") + k, (*text)[k]);
  cmd->add_option("--loss", *loss, "Bernoulli loss probability per packet")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--ge", *ge, "Gilbert-Elliott loss: P R LOSS_GOOD LOSS_BAD")->expected(4);
  cmd->add_option("--queue-packets", *queuePackets, "drop-tail limit in packets");
  cmd->add_option("--queue-bytes", *queueBytes, "drop-tail limit in bytes");
  cmd->add_option("--mtu", *mtu, "MTU of the TUN devices")->capture_default_str();
  cmd->add_flag("--reorder", *reorder, "jitter may reorder packets");
  cmd->add_option("--probes", probe->probes, "UDP round trips")->capture_default_str();
  cmd->add_option("--iperf", probe->iperfS, "seconds of one iperf3 TCP stream a -> b (0: none)");
  cmd->add_option("--cc", probe->cc,
                  "iperf3's congestion control (cubic, bbr, reno: what the kernel offers)");
  auto batchUs = std::make_shared<double>(0);
  addModerationOption(cmd, *batchUs);
  cmd->callback([=] {
    json j = {{"mtu", *mtu}, {"reorder", *reorder}};
    for (const auto& [k, v] : *text)
      if (!v.empty()) j[k] = v;
    if (*loss > 0) j["loss"] = *loss;
    if (!ge->empty())
      j["loss"] = {
          {"p", (*ge)[0]}, {"r", (*ge)[1]}, {"loss_good", (*ge)[2]}, {"loss_bad", (*ge)[3]}};
    if (*queuePackets) j["queue_packets"] = *queuePackets;
    if (*queueBytes) j["queue_bytes"] = *queueBytes;
    emulator::DelayLineOptions o;
    o.aToB = emulator::packetLinkSpecFromJson(j, "delayline");
    o.bToA = o.aToB;
    o.bToA.seed = o.aToB.seed + 1;
    o.batchS = *batchUs < 0 ? -1 : *batchUs * 1e-6;  // negative: auto
    std::cout << emulator::probeDelayLine(o, *probe).dump(2) << std::endl;
  });
}

// `slowpipe emulator tcp-messages`: messages over one TCP connection through the delay line
// against the tcp link model (emulator/delay_line.h messageTimes).
void addTcpMessagesCommand(CLI::App& emu) {
  auto text = std::make_shared<std::map<std::string, std::string>>();
  auto probe = std::make_shared<emulator::MessageProbe>();
  auto mtu = std::make_shared<int>(1500);
  auto loss = std::make_shared<double>(0.0);
  auto seed = std::make_shared<uint64_t>(1);
  auto* cmd =
      emu.add_subcommand("tcp-messages",
                         "messages over one TCP connection through the delay line, against the "
                         "tcp link model (root)");
  cmd->add_option("--rate", (*text)["rate"], "e.g. 1Gbps")->required();
  cmd->add_option("--delay", (*text)["delay"], "one way, e.g. 50ms")->required();
  cmd->add_option("--mtu", *mtu, "MTU of the line")->capture_default_str();
  cmd->add_option("--bytes", probe->bytes, "message sizes in bytes (repeatable)")->required();
  cmd->add_option("--idle", probe->idleS,
                  "seconds without traffic before each message (one per message)")
      ->required();
  cmd->add_option("--cc", probe->cc, "congestion control of the sending socket");
  cmd->add_option("--loss", *loss, "Bernoulli loss probability per packet, data direction only")
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--seed", *seed, "of the line's loss draws (and the model's)")
      ->capture_default_str();
  cmd->add_option("--wmem-max", probe->wmemMax,
                  "net.ipv4.tcp_wmem's maximum in both namespaces, bytes (and the model's "
                  "network.tcp.wmem_max; default: the kernel's)")
      ->check(CLI::Range(uint64_t{65536}, uint64_t{1} << 31));
  cmd->add_option("--rmem-max", probe->rmemMax,
                  "net.ipv4.tcp_rmem's maximum in both namespaces, bytes (and the model's "
                  "network.tcp.rmem_max; default: the kernel's)")
      ->check(CLI::Range(uint64_t{65536}, uint64_t{1} << 31));  // as network.tcp takes them
  cmd->add_option("--streams", probe->streams,
                  "connections a message is striped over (and the model's network.tcp.streams)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--trace-ms", probe->traceS, "sample the sender's cwnd this often (ms; 0: never)")
      ->transform(CLI::Validator(
          [](std::string& v) {  // checked as given (ms), then handed on in seconds
            std::string error = nonNegativeNumber()(v);
            if (error.empty()) v = std::to_string(std::stod(v) / 1000);
            return error;
          },
          "MS"));
  auto batchUs = std::make_shared<double>(0);
  addModerationOption(cmd, *batchUs);
  cmd->callback([=] {
    emulator::DelayLineOptions o;
    o.aToB = emulator::packetLinkSpecFromJson(
        {{"rate", (*text)["rate"]}, {"delay", (*text)["delay"]}, {"mtu", *mtu}}, "tcp-messages");
    o.bToA = o.aToB;
    o.aToB.loss = *loss;
    o.aToB.seed = *seed;
    o.bToA.seed = *seed + 1;
    o.batchS = *batchUs < 0 ? -1 : *batchUs * 1e-6;  // negative: auto
    std::cout << emulator::messageTimes(o, *probe).dump(2) << std::endl;
  });
}

// `slowpipe emulator tcp-rebill FILE...`: the tcp model again on saved tcp-messages results, in
// place.
void addTcpRebillCommand(CLI::App& emu) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = emu.add_subcommand(
      "tcp-rebill", "bill the tcp link model again on saved tcp-messages results (rewrites them)");
  cmd->add_option("files", *files, "tcp-messages JSON files")->required()->check(CLI::ExistingFile);
  cmd->callback([files] {
    for (const auto& f : *files) {
      nlohmann::json run;
      try {
        run = nlohmann::json::parse(std::ifstream(f));
        emulator::billTcpModel(run);
      } catch (const std::exception& e) {
        throw std::runtime_error(f + ": " + e.what() +
                                 " (expected the output of slowpipe emulator tcp-messages)");
      }
      runtime::writeJsonAtomically(f, run);
    }
    std::printf("re-billed %zu file(s)\n", files->size());
  });
}

void addEmulatorCommands(CLI::App& app) {
  auto* emu = app.add_subcommand("emulator", "kernel backend housekeeping");
  emu->require_subcommand(1);
  auto all = std::make_shared<bool>(false);
  auto* cleanup = emu->add_subcommand(
      "cleanup", "remove slowpipe namespaces and tc-dev qdiscs left by killed runs");
  cleanup->add_flag("--all", *all, "also namespaces of live processes");
  cleanup->callback([all] {
    const auto removed = emulator::cleanupNamespaces(*all);
    std::printf("removed %zu namespace(s)%s\n", removed.size(), removed.empty() ? "" : ":");
    for (const auto& n : removed) std::printf("  %s\n", n.c_str());
    const auto shaped = emulator::cleanupDeviceShaping();
    std::printf("removed the tc-dev shaping of %zu interface(s)%s\n", shaped.size(),
                shaped.empty() ? "" : ":");
    for (const auto& n : shaped) std::printf("  %s\n", n.c_str());
  });
  addDelayLineCommand(*emu);
  addTcpMessagesCommand(*emu);
  addTcpRebillCommand(*emu);
  emu->add_subcommand("probe", "show which qdiscs the kernel offers")->callback([] {
    const auto& f = emulator::kernelFeatures();
    std::cout << json{{"root", f.root},
                      {"htb", f.htb},
                      {"tbf", f.tbf},
                      {"netem", f.netem},
                      {"note", f.note}}
                     .dump(2)
              << std::endl;
  });
}

}  // namespace slowpipe::tools
