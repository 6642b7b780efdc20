// Hugging Face checkpoints on disk, torch-free: safetensors files (one, or shards listed by
// model.safetensors.index.json) memory-mapped and checked before anything is allocated, and a
// writer of the same format.
//
// A safetensors file is: u64 little-endian N | N bytes of JSON header {"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {...}} | the data, offsets relative to its start.
// Every header is checked against the file before a tensor is read: N within the file, each
// tensor's dtype one of F32/F16/BF16, its shape's elements x dtype size = end - begin, its bytes
// inside the data, no two tensors overlapping. Errors name the file, the tensor and what was
// expected.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {

struct TensorView {
  std::string dtype;  // F32, F16 or BF16
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  uint64_t bytes = 0;
  std::string file;  // where it lives (for errors)
  int64_t numel() const;
  // The values as fp32 (F16 and BF16 widened exactly).
  std::vector<float> toFloat() const;
};

// One mapped safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  // Every tensor of `header` checked against the data region and recorded (throws naming it).
  void readHeader(const std::string& path, const nlohmann::json& header, const uint8_t* dataStart,
                  uint64_t dataBytes);
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
  nlohmann::json metadata_;
};

// A checkpoint folder: model.safetensors, or the shards model.safetensors.index.json lists. Only
// the shards holding a wanted tensor are mapped (a stage maps its own layers' files).
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);
  // Every tensor name the folder holds.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const;
  // The tensor `name` (maps its shard on first use); throws naming the folder when it is absent.
  const TensorView& tensor(const std::string& name);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::map<std::string, std::string> fileOf_;  // tensor -> shard file
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

// Writes `tensors` (name -> (shape, fp32 values)) as one F32 safetensors file, whole or not at all.
void writeSafetensors(
    const std::string& path,
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& tensors,
    const nlohmann::json& metadata = nlohmann::json::object());

}  // namespace slowpipe::runtime
