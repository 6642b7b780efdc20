// The result document of one run (schema "slowpipe.result/1"; fields in README "Result JSON") and
// the summary math shared by the launcher and the sweep.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {

constexpr const char* kResultSchema = "slowpipe.result/1";

// Steady state: steps of epochs >= 1 when there is more than one epoch (AC-SGD's first epoch is
// full precision), else every step but the first. Returns the summary object.
nlohmann::json summarizeSteps(const nlohmann::json& steps, const nlohmann::json& evals);
// Host, cores, compiler, libtorch version, git commit of the source tree.
nlohmann::json environmentInfo(const std::string& torchVersion);
// Sender and receiver codec states after a run, from every rank's "done" record (codec_state[rank]:
// fwd/bwd sender/receiver digests, dp_digests {pair key: {"send"|"recv": digest}}): "" when every
// pipeline link (both directions) and every DP codec pair was reported by both of its ends with
// equal digests, else what differs or is missing. A key reported by one end only is a failure: a
// check that passes when an end is silent cannot fail.
// ring: the pipeline closes (interleaved model chunks), stage S-1 -> 0 is a link too.
std::string codecStatesProblem(const nlohmann::json& codecState, int stages, int replicas,
                               bool ring = false);
// Reads a JSON file; a missing or malformed file is std::invalid_argument "<what> '<path>' cannot
// be read" / "... is not valid JSON: <parser message>".
nlohmann::json readJsonFile(const std::string& path, const std::string& what);
// JSON text of `what` (named in errors), with the same depth limit as readJsonFile.
nlohmann::json parseJsonText(const std::string& text, const std::string& what);
constexpr int kMaxJsonDepth = 128;  // objects and arrays nested deeper are refused
// FNV-1a of a file's bytes as 16 hex digits; "" when it cannot be read.
std::string fileDigest(const std::string& path);
// A 64-bit digest as the 16 lower-case hex digits results, caches and sweeps name it by.
std::string hex64(uint64_t v);
// Every file a run spec loads (a plug-in codec's library, a TorchScript codec's module, a link's
// bandwidth trace), each {"path", "role", "digest"}: rebuilding a plug-in at the same path changes
// a digest, so a sweep's resume sees another experiment. `spec` is the resolved spec's JSON.
nlohmann::json specInputs(const nlohmann::json& spec);
// The status a result document stands for, and why when it differs from its "status": a
// "running" result whose writer is gone is "failed" (nothing can write after a kill -9): on the
// writer's host when its pid no longer exists, elsewhere when its heartbeat
// (launcher.heartbeat_unix_s, rewritten at least every 5 s while a run is alive) is older than
// kStaleHeartbeatS. Anything unreadable is "missing".
constexpr double kStaleHeartbeatS = 60;
std::string resultStatus(const nlohmann::json& result, std::string* why = nullptr);
// This machine's host name (recorded with a launcher's pid: a pid means something on its host
// only).
std::string hostName();
// Writes `doc` to path via a temporary file and rename, so readers never see a partial file.
// Every write and the close are checked; a failure throws std::runtime_error naming the file and
// the errno, removes the temporary file and leaves `path` as it was.
void writeJsonAtomically(const std::string& path, const nlohmann::json& doc);
// The same for any text. The temporary file has a name of its own (mkstemp, O_EXCL): a link
// planted beside `path` is never written through.
void writeFileAtomically(const std::string& path, const std::string& text);
// Opens `path` for writing (created or truncated) without following a symbolic link there; throws
// naming the file (a link is refused as such). The caller closes the descriptor.
int createFileNoFollow(const std::string& path);

// Another slowpipe process holds the folder (FolderLock).
struct FolderInUse : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// An exclusive lock on an output folder for as long as the object lives (flock on
// DIR/.slowpipe.lock, which names its holder): two runs or sweeps writing into one folder
// overwrote each other's files. Creates the folder; throws FolderInUse naming the holder.
class FolderLock {
 public:
  FolderLock(const std::string& dir, const std::string& what);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};
// A run's last write: writeJsonAtomically, and when that fails (a full disk) a short document with
// status "failed", the reason and "truncated": true, in place if need be, so that no reader finds
// "running" for a run that ended. Returns false when it wrote the short form; throws only when
// even that cannot be written.
bool writeFinalResult(const std::string& path, nlohmann::json doc);

}  // namespace slowpipe::runtime
