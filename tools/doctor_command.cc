// `slowpipe doctor`: what this machine offers each backend and tier, and what a missing piece
// costs, in one screen. Every line is a probe made now (the kernel's qdiscs in a throwaway
// namespace, a TUN open, the BLAS the loader resolves), never a guess from the distribution.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "emulator/netns.h"
#include "simulator/packet_network.h"
#include "tools/commands.h"

namespace slowpipe::tools {
namespace {

using nlohmann::json;

bool onPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  size_t at = 0;
  while (at <= p.size()) {
    const size_t end = std::min(p.find(':', at), p.size());
    if (const std::string dir = p.substr(at, end - at);
        !dir.empty() && access((dir + "/" + tool).c_str(), X_OK) == 0)
      return true;
    at = end + 1;
  }
  return false;
}

struct Check {
  std::string name;
  bool ok;
  std::string detail;  // what it is (ok) or what its absence costs
};

std::vector<Check> checks() {
  std::vector<Check> out;
  const emulator::KernelFeatures& k = emulator::kernelFeatures();
  out.push_back(
      {"root", k.root,
       k.root
           ? "backend tc (namespaces, veth pairs, qdiscs) can run"
           : "backend tc refuses to start: run as root, or use backend user (user-space shaping)"});
  const bool tun = [] {
    const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd >= 0) close(fd);
    return fd >= 0;
  }();
  out.push_back(
      {"TUN", tun,
       tun ? "/dev/net/tun: the delay line (latency, jitter, loss without netem)"
           : "no /dev/net/tun: on a kernel without netem, backend tc carries no latency"});
  out.push_back({"HTB qdisc", k.htb,
                 k.htb ? "backend tc shapes rates with HTB"
                       : "backend tc cannot shape rates (no HTB): " + k.note});
  out.push_back({"netem qdisc", k.netem,
                 k.netem ? "delay, jitter and loss in the kernel"
                         : "delay, jitter and loss go through slowpipe's TUN delay line instead "
                           "(measured fidelity: results/README)"});
  out.push_back(
      {"tbf qdisc", k.tbf, k.tbf ? "present (not needed)" : "absent (not needed: HTB shapes)"});
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  out.push_back({"cores", cores >= 4,
                 std::to_string(cores) + " usable; " +
                     (cores >= 4 ? "stages get cores of their own"
                                 : "stages share cores: runs of 2+ stages time-share, which the "
                                   "results say (host speed)")});
  std::error_code ec;
  const std::string blas =
      std::filesystem::canonical("/usr/lib/x86_64-linux-gnu/libblas.so.3", ec).string();
  const bool omp = !ec && blas.find("openblas-openmp") != std::string::npos;
  out.push_back(
      {"BLAS", omp,
       ec ? "libblas.so.3 not found: libtorch falls back to its reference loops (20x slower)"
          : blas + (omp ? ""
                        : ": not the OpenMP OpenBLAS (tools/setup.sh pins it; training ran 5x "
                          "slower)")});
  const bool cuda = torch::cuda::is_available();
  out.push_back(
      {"CUDA", cuda,
       cuda ? std::to_string(torch::cuda::device_count()) + " device(s): runtime.device cuda"
            : std::string("no CUDA device or a CPU-only libtorch: runtime.device cuda refused; the "
                          "simulator projects GPUs "
                          "(analytic:H100, A100, ...)") +
                  (onPath("nvcc") ? "; nvcc found: -DSLOWPIPE_CUDA=ON compiles the device codecs"
                                  : "")});
  out.push_back({"ns-3", simulator::haveNs3(),
                 simulator::haveNs3() ? "network.model ns3 in the simulator"
                                      : "built without -DSLOWPIPE_NS3=ON: network.model ns3 "
                                        "refused (apt-get install libns3-dev)"});
  for (const auto& [tool, why] : std::vector<std::pair<std::string, std::string>>{
           {"ip", "namespaces and veth pairs (iproute2): backend tc"},
           {"tc", "qdiscs (iproute2): backend tc"},
           {"mpirun", "multi-host runs started by mpirun (openmpi-bin)"},
           {"srun", "Slurm-started runs (slurm-wlm)"},
           {"iperf3", "the delay line's TCP check (emulator delayline)"},
           {"chromium", "the report's headless render in the tests"},
           {"spm_encode", "SentencePiece's own encoder, the tokenizer check (sentencepiece)"}}) {
    const bool have = onPath(tool);
    out.push_back({tool, have, have ? why : "missing: " + why});
  }
  const bool plots = std::system("/usr/bin/python3 -c 'import matplotlib' > /dev/null 2>&1") == 0;
  out.push_back({"matplotlib", plots,
                 plots ? "slowpipe plot and report draw figures"
                       : "slowpipe plot / report cannot draw (python3-matplotlib)"});
  return out;
}

}  // namespace

void addDoctorCommand(CLI::App& app) {
  auto asJson = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("doctor",
                                 "what this machine offers each backend (root, namespaces, TUN, "
                                 "qdiscs, cores, BLAS, CUDA, ns-3, tools) and what is missing");
  cmd->add_flag("--json", *asJson, "one JSON object instead of the table");
  cmd->callback([=] {
    const std::vector<Check> all = checks();
    if (*asJson) {
      json j = json::object();
      for (const auto& c : all) j[c.name] = {{"ok", c.ok}, {"detail", c.detail}};
      std::printf("%s\n", j.dump(1).c_str());
      return;
    }
    for (const auto& c : all)
      std::printf("  %-4s %-12s %s\n", c.ok ? "ok" : "--", c.name.c_str(), c.detail.c_str());
  });
}

}  // namespace slowpipe::tools
