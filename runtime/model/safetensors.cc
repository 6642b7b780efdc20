// Safetensors reading and writing (safetensors.h).
#include "runtime/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "compression/half.h"
#include "runtime/records/result.h"

namespace slowpipe::runtime {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

int dtypeSize(const std::string& d) { return d == "F32" ? 4 : (d == "F16" || d == "BF16") ? 2 : 0; }

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw std::invalid_argument("checkpoint '" + file + "': " + what);
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> TensorView::toFloat() const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (dtype == "F32") {
    std::memcpy(out.data(), data, static_cast<size_t>(n) * 4);
  } else if (dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      out[i] = compression::halfToFloat(h);
    }
  } else {  // BF16: the high half of an fp32
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, std::string("cannot open it: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    bad(path, "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    close(fd);
    bad(path, "is " + std::to_string(size_) +
                  " bytes; a safetensors file starts with an 8-byte header length");
  }
  map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    bad(path, std::string("cannot map it: ") + std::strerror(errno));
  }
  const auto* base = static_cast<const uint8_t*>(map_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  if (n > size_ - 8) {
    munmap(map_, size_);
    map_ = nullptr;
    bad(path, "its header says " + std::to_string(n) + " bytes, but the file has " +
                  std::to_string(size_ - 8) + " after the length");
  }
  json header;
  try {
    header = parseJsonText(
        std::string(reinterpret_cast<const char*>(base + 8), static_cast<size_t>(n)), "header");
  } catch (const std::exception& e) {
    munmap(map_, size_);
    map_ = nullptr;
    bad(path, std::string("header: ") + e.what());
  }
  try {
    readHeader(path, header, base + 8 + n, size_ - 8 - n);
  } catch (...) {
    munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

void SafetensorsFile::readHeader(const std::string& path, const json& header,
                                 const uint8_t* dataStart, uint64_t dataBytes) {
  if (!header.is_object()) bad(path, "header: expected a JSON object");
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = t;
      continue;
    }
    const std::string w = "tensor '" + name + "'";
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2)
      bad(path, w + ": expected {\"dtype\", \"shape\", \"data_offsets\": [begin, end]}");
    TensorView v;
    v.dtype = t["dtype"];
    v.file = path;
    if (dtypeSize(v.dtype) == 0)
      bad(path, w + ": dtype " + v.dtype + "; expected F32, F16 or BF16");
    uint64_t numel = 1;
    for (const json& d : t["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        bad(path, w + ": shape " + t["shape"].dump());
      const uint64_t x = d.get<uint64_t>();
      if (x != 0 && numel > (uint64_t{1} << 62) / x)
        bad(path, w + ": shape " + t["shape"].dump() + " is too large");
      numel *= x;
      v.shape.push_back(static_cast<int64_t>(x));
    }
    const json& o = t["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      bad(path, w + ": data_offsets " + o.dump());
    const uint64_t begin = o[0], end = o[1];
    if (begin > end || end > dataBytes)
      bad(path, w + ": data_offsets " + o.dump() + " outside the " + std::to_string(dataBytes) +
                    " data bytes (a truncated file?)");
    if (end - begin != numel * dtypeSize(v.dtype))
      bad(path, w + ": " + std::to_string(end - begin) + " bytes for shape " + t["shape"].dump() +
                    " of " + v.dtype + " (expected " + std::to_string(numel * dtypeSize(v.dtype)) +
                    ")");
    v.data = dataStart + begin;
    v.bytes = end - begin;
    spans.push_back({begin, end});
    tensors_[name] = v;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      bad(path, "two tensors' data overlap at byte " + std::to_string(spans[i].first));
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(index)) {
    const json j = readJsonFile(index.string(), "checkpoint index");
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      bad(index.string(), "expected {\"weight_map\": {\"tensor\": \"shard file\", ...}}");
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        bad(index.string(),
            "weight_map['" + name + "']: " + file.dump() + " is not a file name in the folder");
      fileOf_[name] = (fs::path(dir) / file.get<std::string>()).string();
    }
  } else if (fs::exists(single)) {
    auto f = std::make_unique<SafetensorsFile>(single.string());
    for (const auto& [name, t] : f->tensors()) fileOf_[name] = single.string();
    open_[single.string()] = std::move(f);
  } else {
    throw std::invalid_argument(
        "checkpoint '" + dir +
        "': neither model.safetensors nor model.safetensors.index.json there");
  }
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : fileOf_) out.push_back(n);
  return out;
}

bool Checkpoint::has(const std::string& name) const { return fileOf_.count(name) > 0; }

const TensorView& Checkpoint::tensor(const std::string& name) {
  const auto it = fileOf_.find(name);
  if (it == fileOf_.end())
    throw std::invalid_argument("checkpoint '" + dir_ + "': has no tensor '" + name + "'");
  auto& f = open_[it->second];
  if (!f) f = std::make_unique<SafetensorsFile>(it->second);
  const auto t = f->tensors().find(name);
  if (t == f->tensors().end())
    bad(it->second, "the index puts tensor '" + name + "' here, but the file has no such tensor");
  return t->second;
}

void writeSafetensors(
    const std::string& path,
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& tensors,
    const json& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = 4 * t.second.size();
    header[name] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h += ' ';  // the data 8-byte aligned, as the reference writer pads
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((static_cast<uint64_t>(h.size()) >> (8 * i)) & 0xff);
  out += h;
  out.reserve(out.size() + at);
  for (const auto& [name, t] : tensors)
    out.append(reinterpret_cast<const char*>(t.second.data()), 4 * t.second.size());
  writeFileAtomically(path, out);
}

}  // namespace slowpipe::runtime
