// Result summary, environment capture, atomic JSON writes.
#include "runtime/records/result.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "compression/bytes.h"
#include "runtime/exec/ranks.h"

#include "slowpipe_provenance.h"  // generated at build time (tools/provenance.cmake)

namespace slowpipe::runtime {

using nlohmann::json;

json summarizeSteps(const json& steps, const json& evals) {
  json s = {{"steps", steps.size()}};
  if (steps.empty()) return s;
  int maxEpoch = 0;
  for (const auto& st : steps) maxEpoch = std::max(maxEpoch, st.value("epoch", 0));
  std::vector<const json*> steady;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int e = steps[i].value("epoch", 0);
    if (maxEpoch >= 1 ? e >= 1 : i >= 1) steady.push_back(&steps[i]);
  }
  if (steady.empty()) steady.push_back(&steps.back());
  double time = 0, tokens = 0, wait = 0, fwdWire = 0, bwdWire = 0, fwdRaw = 0, bwdRaw = 0,
         compute = 0, enc = 0, dec = 0;
  double gradWire = 0, gradRaw = 0, allreduce = 0;
  bool dp = false;
  for (const json* st : steady) {
    time += (*st)["time_s"].get<double>();
    tokens += (*st)["tokens"].get<double>();
    wait += (*st)["breakdown_s"].value("wait", 0.0);
    compute += (*st)["breakdown_s"].value("compute", 0.0);
    enc += (*st)["breakdown_s"].value("encode", 0.0);
    dec += (*st)["breakdown_s"].value("decode", 0.0);
    fwdWire += (*st)["bytes"]["forward"]["wire"].get<double>();
    bwdWire += (*st)["bytes"]["backward"]["wire"].get<double>();
    fwdRaw += (*st)["bytes"]["forward"]["raw"].get<double>();
    bwdRaw += (*st)["bytes"]["backward"]["raw"].get<double>();
    if ((*st)["bytes"].contains("gradient")) {  // data-parallel runs
      dp = true;
      gradWire += (*st)["bytes"]["gradient"]["wire"].get<double>();
      gradRaw += (*st)["bytes"]["gradient"]["raw"].get<double>();
      allreduce += (*st)["breakdown_s"].value("allreduce", 0.0);
    }
  }
  const double n = static_cast<double>(steady.size());
  s["steady_steps"] = steady.size();
  s["steady_from_step"] = (*steady.front())["step"];
  s["mean_step_time_s"] = time / n;
  s["throughput_tokens_per_s"] = tokens / time;
  s["wait_share"] = wait / time;
  s["breakdown_share"] = {{"compute", compute / time},
                          {"encode", enc / time},
                          {"decode", dec / time},
                          {"wait", wait / time}};
  // Every byte every rank sent: pipeline activations and gradients, and (data parallelism) the
  // replicas' exchange, also listed on its own.
  s["wire_bytes_per_step"] = (fwdWire + bwdWire + gradWire) / n;
  s["wire_bytes_per_step_forward"] = fwdWire / n;
  s["wire_bytes_per_step_backward"] = bwdWire / n;
  s["raw_bytes_per_step"] = (fwdRaw + bwdRaw + gradRaw) / n;
  const double wire = fwdWire + bwdWire + gradWire;
  s["compression_ratio"] = wire > 0 ? (fwdRaw + bwdRaw + gradRaw) / wire : 1.0;
  if (dp) {
    s["wire_bytes_per_step_gradient"] = gradWire / n;
    s["raw_bytes_per_step_gradient"] = gradRaw / n;
    s["breakdown_share"]["allreduce"] = allreduce / time;
  }
  // What each stage's process had of the machine (runs that measured it, not the simulator): CPU
  // seconds a step, that over the step's time (the share of one core), preemptions a second.
  double cpu = 0, preempted = 0, stageTime = 0, rows = 0;
  for (const json* st : steady)
    for (const json& row : st->value("breakdown_s_per_stage", json::array()))
      if (row.contains("cpu_s")) {
        rows += 1;
        cpu += row["cpu_s"].get<double>();
        preempted += row.value("preempted", 0.0);
        stageTime += (*st)["time_s"].get<double>();
      }
  if (rows > 0 && stageTime > 0)
    s["stage_cpu"] = {{"cpu_s_per_step", cpu / rows},
                      {"core_share", cpu / stageTime},
                      {"preemptions_per_s", preempted / stageTime}};
  s["final_train_loss"] = steps.back().value("loss", json());
  s["wall_time_s"] = steps.back().value("wall_s", 0.0);
  if (!evals.empty()) s["final_val_loss"] = evals.back()["val_loss"];
  return s;
}

std::string codecStatesProblem(const json& codecState, int stages, int replicas, bool ring) {
  const RankLayout layout{stages, replicas, 1};
  auto of = [&](int stage, int replica) -> json {
    const std::string key = std::to_string(layout.rank({stage, replica}));
    return codecState.contains(key) ? codecState[key] : json::object();
  };
  auto field = [](const json& j, const char* k) -> std::string {
    return j.contains(k) && !j[k].is_null() ? j[k].dump() : std::string();
  };
  for (int q = 0; q < replicas; ++q)
    for (int s = 0; s + 1 < stages || (ring && s < stages && stages > 1); ++s) {
      const int t = ringIndex(s + 1, stages);  // a ring (model chunks) closes stage S-1 -> 0
      const json a = of(s, q), b = of(t, q);
      const std::string link = "stage " + std::to_string(s) + " <-> " + std::to_string(t) +
                               " of replica " + std::to_string(q);
      for (const auto& [send, recv, what] :
           {std::tuple{field(a, "fwd_sender_digest"), field(b, "fwd_receiver_digest"), "forward"},
            std::tuple{field(b, "bwd_sender_digest"), field(a, "bwd_receiver_digest"),
                       "backward"}}) {
        if (send.empty() || recv.empty())
          return link + ": the " + what + " codec state was not reported by both ends";
        if (send != recv)
          return link + ": " + what + " sender digest " + send + " != receiver digest " + recv;
      }
    }
  for (int s = 0; s < stages; ++s) {
    std::map<std::string, std::map<std::string, std::set<std::string>>>
        seen;  // key -> role -> digests
    for (int q = 0; q < replicas; ++q) {
      const json st = of(s, q);
      if (!st.contains("dp_digests") || !st["dp_digests"].is_object()) {
        if (replicas > 1)
          return "stage " + std::to_string(s) + " replica " + std::to_string(q) +
                 ": no data-parallel codec state was reported";
        continue;
      }
      for (const auto& [key, ends] : st["dp_digests"].items())
        for (const auto& [role, d] : ends.items())
          seen[key][role].insert(d.is_string() ? d.get<std::string>() : d.dump());
    }
    // Every replica reported, none exchanged (dp.local_steps beyond the run's steps): nothing to
    // compare.
    for (const auto& [key, roles] : seen) {
      const std::string where = "stage " + std::to_string(s) + " DP pair '" + key + "'";
      if (!roles.count("send") || !roles.count("recv"))
        return where + ": reported by its " + (roles.count("send") ? "sender" : "receiver") +
               " only";
      std::set<std::string> all = roles.at("send");
      all.insert(roles.at("recv").begin(), roles.at("recv").end());
      if (all.size() != 1) return where + ": the ends' digests differ";
    }
  }
  return "";
}

std::string fileDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  uint64_t h = compression::kFnvOffset;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    h = compression::fnv1a(buf, static_cast<size_t>(in.gcount()), h);
  }
  return hex64(h);
}

std::string hex64(uint64_t v) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(v));
  return out;
}

namespace {

// "plugin:path=F" and "torchscript:path=F" anywhere in a codec spec (also inside ef(...),
// hadamard(...)). acsgd's path= names a file it writes, not one it loads.
void codecInputs(const std::string& codec, const std::string& field, json& out) {
  for (const std::string kind : {"plugin:path=", "torchscript:path="}) {
    for (size_t at = codec.find(kind); at != std::string::npos; at = codec.find(kind, at + 1)) {
      const size_t from = at + kind.size();
      const size_t end = codec.find_first_of(",;)", from);
      const std::string path =
          codec.substr(from, end == std::string::npos ? std::string::npos : end - from);
      out.push_back({{"path", path},
                     {"role", field + " (" + kind.substr(0, kind.find(':')) + ")"},
                     {"digest", fileDigest(path)}});
    }
  }
}

// Every "trace" file in a topology's JSON (the default link and its overrides).
void traceInputs(const json& j, const std::string& field, json& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "trace" && v.is_string())
        out.push_back({{"path", v}, {"role", field + ".trace"}, {"digest", fileDigest(v)}});
      else if (k == "trace" && v.is_object() && v.contains("file") &&
               v["file"].is_string())  // another format
        out.push_back(
            {{"path", v["file"]}, {"role", field + ".trace"}, {"digest", fileDigest(v["file"])}});
      else
        traceInputs(v, field + "." + k, out);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      traceInputs(j[i], field + "[" + std::to_string(i) + "]", out);
  }
}

}  // namespace

json specInputs(const json& spec) {
  json out = json::array();
  const json comp = spec.value("compression", json::object());
  for (const char* k : {"forward", "backward"})
    if (comp.contains(k) && comp[k].is_string())
      codecInputs(comp[k], std::string("compression.") + k, out);
  const json dp = spec.value("dp", json::object());
  if (dp.contains("codec") && dp["codec"].is_string()) codecInputs(dp["codec"], "dp.codec", out);
  const json net = spec.value("network", json::object());
  for (const char* k : {"links", "dp_links"})
    if (net.contains(k)) traceInputs(net[k], std::string("network.") + k, out);
  return out;
}

namespace {

// Refuses nesting deeper than kMaxJsonDepth while parsing, before the document exists (a spec
// nested 100,000 deep crashed the CLI in a recursive copy).
template <typename Input>
json parseLimited(Input&& in, const std::string& name) {
  const json::parser_callback_t limit = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw std::invalid_argument(
          name + " is nested more than " + std::to_string(kMaxJsonDepth) +
          " objects or arrays deep (refused: no spec, trace or profile needs that)");
    return true;
  };
  try {
    return json::parse(std::forward<Input>(in), limit);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(name + " is not valid JSON: " + e.what());
  }
}

}  // namespace

json readJsonFile(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument(what + " '" + path + "' is a folder, not a file");
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(what + " '" + path + "' cannot be read");
  return parseLimited(in, what + " '" + path + "'");
}

json parseJsonText(const std::string& text, const std::string& what) {
  return parseLimited(text, what);
}

std::string resultStatus(const json& r, std::string* why) {
  if (!r.is_object()) return "missing";
  const std::string st = r.value("status", "unknown");
  if (st != "running") return st;
  const json l =
      r.contains("launcher") && r["launcher"].is_object() ? r["launcher"] : json::object();
  const int pid = l.contains("pid") && l["pid"].is_number_integer() ? l["pid"].get<int>() : 0;
  const std::string host =
      l.contains("host") && l["host"].is_string() ? l["host"].get<std::string>() : "";
  if (host == hostName()) {
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
      if (why) *why = "its writer (pid " + std::to_string(pid) + " on this host) is gone";
      return "failed";
    }
    return "running";
  }
  if (l.contains("heartbeat_unix_s") && l["heartbeat_unix_s"].is_number()) {
    const double age =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
        l["heartbeat_unix_s"].get<double>();
    if (age > kStaleHeartbeatS) {
      if (why)
        *why = "its writer (pid " + std::to_string(pid) + " on " + host +
               ") wrote no heartbeat for " + std::to_string(static_cast<int64_t>(age)) + " s";
      return "failed";
    }
  }
  return "running";  // cannot tell from here
}

std::string hostName() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

json environmentInfo(const std::string& torchVersion) {
  json env = {{"host", hostName()},
              {"cores", std::thread::hardware_concurrency()},
              {"compiler", "g++ " __VERSION__},
              {"libtorch", torchVersion}};
  // Stamped at build time: the commit and dirty flag of the tree this binary was built from.
  env["git_commit"] = SLOWPIPE_GIT_COMMIT;
  env["git_dirty"] = SLOWPIPE_GIT_DIRTY != 0;
  return env;
}

namespace {

std::string errnoText(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

// Writes all of `text` to fd; false with errno set on the first failing write.
bool writeAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void writeFileAtomically(const std::string& path, const std::string& text) {
  // A temporary name of our own, made with O_EXCL (mkstemp): a symbolic link or file planted at a
  // predictable "path.tmp" is never written through. rename() replaces `path` itself, a link
  // there included, never its target.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("cannot create a temporary file beside '" + path +
                             "': " + errnoText(errno));
  // Every step that can fail is checked; on a failure the temporary file goes and `path` keeps
  // its last complete version.
  const bool wrote = ::fchmod(fd, 0644) == 0 && writeAll(fd, text);
  const int writeErr = errno;
  const bool closed = ::close(fd) == 0;
  const int err = !wrote ? writeErr : errno;
  if (!wrote || !closed) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write '" + tmp + "' (" + std::to_string(text.size()) +
                             " bytes): " + errnoText(err) + "; '" + path +
                             "' keeps its previous contents");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + errnoText(e) +
                             (e == EISDIR ? " ('" + path + "' is a folder)" : ""));
  }
}

void writeJsonAtomically(const std::string& path, const json& doc) {
  writeFileAtomically(path, doc.dump(2) + "\n");
}

int createFileNoFollow(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    const int e = errno;
    throw std::runtime_error(
        "cannot create '" + path + "': " +
        (e == ELOOP
             ? std::string(
                   "it is a symbolic link (refused: a file here is never written through a link)")
             : errnoText(e)));
  }
  return fd;
}

FolderLock::FolderLock(const std::string& dir, const std::string& what) {
  std::filesystem::create_directories(dir);
  const std::string path = (std::filesystem::path(dir) / ".slowpipe.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot open the folder lock '" + path + "': " + errnoText(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char holder[256] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (e != EWOULDBLOCK) throw std::runtime_error("cannot lock '" + path + "': " + errnoText(e));
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    throw FolderInUse("'" + dir + "' is in use by " + who +
                      ": two runs or sweeps writing into one folder overwrite each other's "
                      "files; wait for it to end or choose another --out");
  }
  const std::string me =
      "slowpipe " + what + " (pid " + std::to_string(getpid()) + " on " + hostName() + ")\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    std::fprintf(stderr, "slowpipe: could not write the holder into '%s' (the lock holds)\n",
                 path.c_str());
}

FolderLock::~FolderLock() {
  if (fd_ >= 0)
    ::close(fd_);  // releases the lock; the file stays (removing it would race a waiter)
}

bool writeFinalResult(const std::string& path, json doc) {
  try {
    writeJsonAtomically(path, doc);
    return true;
  } catch (const std::exception& e) {
    // The full document does not fit (a full disk): the status and the reason matter most. A
    // small document in its place, through a temporary file, then in place as the last resort
    // (a reader must never find "running" for a run that ended).
    const std::string why = std::string("the result could not be written in full: ") + e.what();
    json small = {
        {"schema", doc.value("schema", kResultSchema)},
        {"status", "failed"},
        {"reason",
         doc.value("status", "") == "failed" ? doc.value("reason", "") + "; " + why : why},
        {"launcher", doc.value("launcher", json::object())},
        {"truncated", true}};
    std::fprintf(stderr, "slowpipe: %s\n", why.c_str());
    try {
      writeJsonAtomically(path, small);
      return false;
    } catch (const std::exception&) {
    }
    // In place, never through a link; a short form that did not fit is removed rather than left
    // as an empty or cut file (a full disk at the start left a 0-byte result.json).
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    const bool ok = fd >= 0 && writeAll(fd, small.dump() + "\n");
    const int err = errno;
    const bool closed = fd >= 0 && ::close(fd) == 0;
    if (!ok || !closed) {
      if (fd >= 0) ::unlink(path.c_str());
      throw std::runtime_error("cannot write '" + path +
                               "' even in short form: " + errnoText(ok ? errno : err) +
                               (fd >= 0 ? " (the cut file was removed)" : ""));
    }
    return false;
  }
}

}  // namespace slowpipe::runtime
