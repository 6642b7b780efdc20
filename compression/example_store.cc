// ExampleStore: slot allocation, dtype conversion, RAM and mmap backings.
#include "compression/example_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "compression/bytes.h"
#include "compression/error.h"
#include "compression/half.h"

namespace slowpipe::compression {
namespace {

constexpr int64_t kQ8Group = 64;

size_t rowBytes(StoreOptions::Dtype d, int64_t n) {
  switch (d) {
    case StoreOptions::Dtype::kFp32:
      return 4 * n;
    case StoreOptions::Dtype::kFp16:
      return 2 * n;
    case StoreOptions::Dtype::kQ8:
      return n + 4 * ((n + kQ8Group - 1) / kQ8Group);
  }
  return 0;
}

void encodeQ8(const float* x, int64_t n, uint8_t* p) {
  for (int64_t g0 = 0; g0 < n; g0 += kQ8Group) {
    const int64_t len = std::min(kQ8Group, n - g0);
    float m = 0.0f;
    for (int64_t i = 0; i < len; ++i) m = std::max(m, std::fabs(x[g0 + i]));
    const float scale = m / 127.0f, inv = m > 0.0f ? 127.0f / m : 0.0f;
    std::memcpy(p, &scale, 4);
    p += 4;
    for (int64_t i = 0; i < len; ++i) {
      const float t = std::clamp(std::floor(x[g0 + i] * inv + 0.5f), -127.0f, 127.0f);
      *p++ = static_cast<uint8_t>(static_cast<int8_t>(t));
    }
  }
}

void decodeQ8(const uint8_t* p, int64_t n, float* out) {
  for (int64_t g0 = 0; g0 < n; g0 += kQ8Group) {
    const int64_t len = std::min(kQ8Group, n - g0);
    float scale;
    std::memcpy(&scale, p, 4);
    p += 4;
    for (int64_t i = 0; i < len; ++i)
      out[g0 + i] = static_cast<float>(static_cast<int8_t>(*p++)) * scale;
  }
}

}  // namespace

std::string storeDtypeName(StoreOptions::Dtype d) {
  switch (d) {
    case StoreOptions::Dtype::kFp32:
      return "fp32";
    case StoreOptions::Dtype::kFp16:
      return "fp16";
    case StoreOptions::Dtype::kQ8:
      return "q8";
  }
  return "?";
}

ExampleStore::ExampleStore(StoreOptions opt) : opt_(std::move(opt)) {
  if (opt_.backing == StoreOptions::Backing::kMmap && opt_.budgetBytes == 0)
    opt_.budgetBytes = uint64_t{1} << 30;
}

void ExampleStore::openBacking() {
  if (opt_.path.empty()) {
    char tmpl[] = "/tmp/slowpipe-store-XXXXXX";
    fd_ = mkstemp(tmpl);
    if (fd_ >= 0) unlink(tmpl);
  } else {
    // O_EXCL: a file that exists belongs to another store (or a crashed run); never share it.
    fd_ = open(opt_.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0 && errno == EEXIST)
      throw CodecError("example store: '" + opt_.path +
                       "' already exists; each store needs a file of its own "
                       "(remove it, or choose another path=)");
  }
  SP_REQUIRE(fd_ >= 0, "example store: cannot create '" + opt_.path + "': " + std::strerror(errno));
  // Unless it is to be kept, the file is unlinked at once: the mapping stays valid, its space lives
  // on `path`'s file system, and nothing is left behind, whatever ends the process (kill -9 too).
  if (!opt_.path.empty() && !opt_.keepFile) unlink(opt_.path.c_str());
  mapBytes_ = opt_.budgetBytes;
  void* p = MAP_FAILED;
  const bool sized = ftruncate(fd_, static_cast<off_t>(mapBytes_)) == 0;
  if (sized) p = mmap(nullptr, mapBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const std::string why = std::strerror(errno);
    if (!opt_.path.empty() && opt_.keepFile)
      unlink(opt_.path.c_str());  // a kept file is for a working store
    throw CodecError("example store: cannot " + std::string(sized ? "map " : "size ") + "'" +
                     opt_.path + "' (" + std::to_string(mapBytes_) + " bytes): " + why);
  }
  map_ = static_cast<uint8_t*>(p);
}

ExampleStore::~ExampleStore() {
  if (map_) munmap(map_, mapBytes_);
  if (fd_ >= 0) close(fd_);
}

void ExampleStore::initRows(int64_t n) {
  if (opt_.backing == StoreOptions::Backing::kMmap && !map_) openBacking();
  rowElements_ = n;
  slotBytes_ = std::max<size_t>(rowBytes(opt_.dtype, n), 1);
  capacity_ = opt_.budgetBytes == 0 ? std::numeric_limits<size_t>::max()
                                    : static_cast<size_t>(opt_.budgetBytes / slotBytes_);
}

uint8_t* ExampleStore::slot(size_t index) const {
  uint8_t* base = map_ ? map_ : const_cast<uint8_t*>(ram_.data());
  return base + index * slotBytes_;
}

void ExampleStore::load(int64_t id, float* out, int64_t n) const {
  const auto it = slots_.find(id);
  SP_REQUIRE(it != slots_.end(), "example store: no buffer for example id " + std::to_string(id));
  SP_REQUIRE(n == rowElements_, "example store: row of " + std::to_string(n) +
                                    " values requested, rows hold " + std::to_string(rowElements_));
  const uint8_t* p = slot(it->second);
  switch (opt_.dtype) {
    case StoreOptions::Dtype::kFp32:
      copyBytes(out, p, 4 * n);
      break;
    case StoreOptions::Dtype::kFp16:
      halfBytesToFloat(p, n, out);
      break;
    case StoreOptions::Dtype::kQ8:
      decodeQ8(p, n, out);
      break;
  }
}

bool ExampleStore::store(int64_t id, const float* x, int64_t n) {
  if (rowElements_ < 0) initRows(n);
  SP_REQUIRE(n == rowElements_, "example store: row of " + std::to_string(n) +
                                    " values for example id " + std::to_string(id) +
                                    ", earlier rows hold " + std::to_string(rowElements_));
  auto it = slots_.find(id);
  if (it == slots_.end()) {
    if (slots_.size() >= capacity_) return false;
    const size_t index = slots_.size();
    if (!map_) ram_.resize((index + 1) * slotBytes_);
    it = slots_.emplace(id, index).first;
  }
  uint8_t* p = slot(it->second);
  switch (opt_.dtype) {
    case StoreOptions::Dtype::kFp32:
      copyBytes(p, x, 4 * n);
      break;
    case StoreOptions::Dtype::kFp16:
      floatToHalfBytes(x, n, p);
      break;
    case StoreOptions::Dtype::kQ8:
      encodeQ8(x, n, p);
      break;
  }
  return true;
}

uint8_t* ExampleStore::rowData(int64_t id) {
  const auto it = slots_.find(id);
  return it == slots_.end() ? nullptr : slot(it->second);
}

void ExampleStore::loadElems(const uint8_t* row, int64_t off, int64_t n, float* out) const {
  SP_REQUIRE(elementwise() && off >= 0 && off + n <= rowElements_,
             "example store: loadElems of [" + std::to_string(off) + ", " +
                 std::to_string(off + n) + ") on a " + storeDtypeName(opt_.dtype) + " row of " +
                 std::to_string(rowElements_));
  if (opt_.dtype == StoreOptions::Dtype::kFp32)
    copyBytes(out, row + 4 * off, 4 * n);
  else
    halfBytesToFloat(row + 2 * off, n, out);
}

void ExampleStore::storeElems(uint8_t* row, int64_t off, int64_t n, const float* x,
                              float* held) const {
  SP_REQUIRE(elementwise() && off >= 0 && off + n <= rowElements_,
             "example store: storeElems of [" + std::to_string(off) + ", " +
                 std::to_string(off + n) + ") on a " + storeDtypeName(opt_.dtype) + " row of " +
                 std::to_string(rowElements_));
  if (opt_.dtype == StoreOptions::Dtype::kFp32) {
    copyBytes(row + 4 * off, x, 4 * n);
    if (held && held != x) copyBytes(held, x, 4 * n);
  } else {
    floatToHalfBytes(x, n, row + 2 * off);
    if (held) halfBytesToFloat(row + 2 * off, n, held);
  }
}

void ExampleStore::prefetch(const std::vector<int64_t>& ids) const {
  if (!map_) return;
  const long page = sysconf(_SC_PAGESIZE);
  for (int64_t id : ids) {
    const auto it = slots_.find(id);
    if (it == slots_.end()) continue;
    const auto begin = reinterpret_cast<uintptr_t>(slot(it->second));
    const uintptr_t aligned = begin - begin % page;
    madvise(reinterpret_cast<void*>(aligned), slotBytes_ + (begin - aligned), MADV_WILLNEED);
  }
}

uint64_t ExampleStore::digest() const {
  std::vector<std::pair<int64_t, size_t>> order(slots_.begin(), slots_.end());
  std::sort(order.begin(), order.end());
  uint64_t h = kFnvOffset;  // over ids and row bytes in id order
  for (const auto& [id, index] : order) {
    h = fnv1a(&id, sizeof id, h);
    h = fnv1a(slot(index), slotBytes_, h);
  }
  return h;
}

}  // namespace slowpipe::compression
