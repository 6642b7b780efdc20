// The codecs' device-pointer entry point (-DSLOWPIPE_CUDA=ON). A DeviceCodec is built from a
// codec spec like makeCodec's; it encodes values that live in CUDA device memory into the payload
// the host codec of that spec writes for the same values and state, and decodes any payload of that
// codec into device memory. So a GPU stage and a CPU stage are interchangeable ends of one link.
//
// Each value is computed on the device with compression/element.h (the CPU kernels' arithmetic,
// checked bit for bit in element_test). What depends on a whole tensor stays the host's code: the
// per-scale max |x| is reduced on the device, then the host codec's QuantStream turns it into the
// payload's scales; payload headers, validation and error messages are the host codec's.
//
// Native here: none, fp16, bf16; quant (symmetric and fixpoint levels, nearest and stochastic
// rounding, channel and group scales); acsgd with channel scales and nearest rounding, its buffers
// m(x) (fp16 or fp32) in device memory or in pinned host memory mapped into the device; topk (any
// bits); randk. make() refuses any other spec, naming it.
//
// Status: compiled in CI (no GPU on those machines); tests/compression/cuda_codec_test.cc checks
// payload bytes, decoded values and state digests against the host codecs on a device, and skips,
// saying why, without one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "compression/codec.h"
#include "compression/cuda/device_kernels.h"

namespace slowpipe::compression::cuda {

// Where acsgd keeps its buffers m(x): device memory, or pinned host memory the kernels reach
// through the bus (for buffers larger than the device, as the reference keeps them on disk).
enum class BufferPlace : uint8_t { kDevice, kPinnedHost };

// A device allocation that grows on demand; never shrinks.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* reserve(size_t bytes);  // contents are not kept when it grows
  void* data() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

class DeviceCodec {
 public:
  virtual ~DeviceCodec() = default;
  static std::unique_ptr<DeviceCodec> make(const std::string& spec,
                                           BufferPlace buffers = BufferPlace::kDevice);

  virtual std::string spec() const = 0;
  // Writes the payload of numelOf(shape) device values at dx into device memory (devicePayload()),
  // returning its size. Waits on `s` only where the host needs a reduction's result.
  virtual size_t encodeToDevice(const float* dx, const Shape& shape, const CodecContext& ctx,
                                Stream s) = 0;
  const uint8_t* devicePayload() const { return payload_.as<uint8_t>(); }
  // encodeToDevice, then the payload appended to out (host); returns when out holds it.
  void encode(const float* dx, const Shape& shape, const CodecContext& ctx, Bytes& out,
              Stream s = nullptr);
  // Decodes a host payload of exactly `size` bytes into numelOf(shape) device floats at dout, with
  // the host codec's validation (CodecError naming the problem; state untouched on error). Returns
  // when dout holds the values.
  virtual void decode(const uint8_t* payload, size_t size, const Shape& shape,
                      const CodecContext& ctx, float* dout, Stream s = nullptr) = 0;
  // The host codec's stateDigest() for the same state (acsgd: its buffers); 0 for stateless codecs.
  virtual uint64_t stateDigest() const { return 0; }

 protected:
  DeviceBuffer payload_;
};

}  // namespace slowpipe::compression::cuda
