// Per-example activation buffers m(x) for AC-SGD, keyed by a stable example id.
//
// Every example has one fixed-size row (the size is set by the first store()). Rows are kept as
// fp32, fp16, or q8 (int8 with one fp32 scale per 64 values, the low-bit buffer of the reference's
// delta-lowbits mode), in RAM or in a file-backed memory map. A byte budget bounds the rows: once
// it is full, store() of a *new* id returns false and the example simply stays unbuffered. That
// decision depends only on the sequence of ids, so sender and receiver stores stay identical.
// The file of a file-backed store is created at the first store() (building a codec to validate a
// spec creates nothing) and is owned by this store alone (O_EXCL: two stores never share a file).
// Unless keepFile is set it is unlinked right after it is opened: the mapping lives on, its space
// on path's file system, and no exit path (kill -9 included) can leave it behind.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace slowpipe::compression {

struct StoreOptions {
  enum class Dtype : uint8_t { kFp32, kFp16, kQ8 };
  enum class Backing : uint8_t { kRam, kMmap };
  Dtype dtype = Dtype::kFp32;
  Backing backing = Backing::kRam;
  std::string path;          // mmap file; empty = an unlinked temporary file
  bool keepFile = false;     // keep `path` on disk (default: unlinked as soon as it is open)
  uint64_t budgetBytes = 0;  // 0 = unlimited (RAM only; mmap defaults to 1 GiB)
};

class ExampleStore {
 public:
  explicit ExampleStore(StoreOptions opt);
  ~ExampleStore();
  ExampleStore(const ExampleStore&) = delete;
  ExampleStore& operator=(const ExampleStore&) = delete;

  bool contains(int64_t id) const { return slots_.count(id) != 0; }
  // Writes the row of id (as stored, i.e. after the dtype's rounding) into out[0, n).
  void load(int64_t id, float* out, int64_t n) const;
  // Stores x[0, n) as the row of id. Returns false (storing nothing) if id is new and the budget
  // is full. Throws CodecError if n differs from the row size of earlier rows.
  bool store(int64_t id, const float* x, int64_t n);
  // Row access for fused loops (AC-SGD's codec): elementwise() stores (fp32, fp16) convert any
  // range of a row on its own. rowData() is the row of id or null; it stays valid until the next
  // store() of a new id. loadElems/storeElems convert values [off, off + n) of such a row;
  // storeElems also writes what the row now holds (after the dtype's rounding) to `held` if given.
  bool elementwise() const { return opt_.dtype != StoreOptions::Dtype::kQ8; }
  uint8_t* rowData(int64_t id);
  void loadElems(const uint8_t* row, int64_t off, int64_t n, float* out) const;
  void storeElems(uint8_t* row, int64_t off, int64_t n, const float* x, float* held) const;
  // Hints the kernel to page in the rows of ids (file-backed store; no-op in RAM).
  void prefetch(const std::vector<int64_t>& ids) const;

  uint64_t bytesUsed() const { return slots_.size() * slotBytes_; }
  size_t size() const { return slots_.size(); }
  int64_t rowElements() const { return rowElements_; }
  uint64_t digest() const;  // hash of every (id, stored row); equal stores give equal digests
  const StoreOptions& options() const { return opt_; }

 private:
  uint8_t* slot(size_t index) const;
  void initRows(int64_t n);
  void openBacking();

  StoreOptions opt_;
  int64_t rowElements_ = -1;
  size_t slotBytes_ = 0;
  size_t capacity_ = 0;  // slots that fit in the budget
  std::unordered_map<int64_t, size_t> slots_;
  std::vector<uint8_t> ram_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  size_t mapBytes_ = 0;
};

std::string storeDtypeName(StoreOptions::Dtype d);

}  // namespace slowpipe::compression
