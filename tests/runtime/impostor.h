// What an impostor on a data socket sends, for the tests of what a receiver refuses: a genuine
// frame with its shape field rewritten (and its checksum made right again), sent as the shaped
// socket's envelope + payload.
#pragma once

#include <cstring>
#include <string>
#include <zmq.hpp>

#include "compression/crc32c.h"
#include "compression/frame.h"
#include "emulator/shaped_socket.h"

namespace slowpipe::runtime {

// `f` (encoded with `ids` example ids) with its shape replaced by `shape` (the same number of
// dimensions), its checksum recomputed.
inline compression::Bytes withShape(compression::Bytes f, const compression::Shape& shape,
                                    size_t ids) {
  std::memcpy(f.data() + 32, shape.data(), 8 * shape.size());
  const size_t lenAt = 32 + 8 * shape.size() + 4 + 8 * ids, payloadAt = lenAt + 12;
  uint32_t crc = compression::crc32c(f.data(), lenAt + 8);
  crc = compression::crc32c(f.data() + payloadAt, f.size() - payloadAt, crc);
  std::memcpy(f.data() + lenAt + 8, &crc, 4);
  return f;
}

// One message as a ShapedSender sends it: the envelope (arrival 0: the receiver adds its delay,
// or `arrival`), then the payload.
inline void sendShaped(zmq::socket_t& push, const void* data, size_t size, double arrival = 0) {
  emulator::Envelope e;
  e.sendTime = emulator::monotonicNow();
  e.arrivalTime = arrival;
  e.bytes = size;
  push.send(zmq::buffer(&e, sizeof e), zmq::send_flags::sndmore);
  push.send(zmq::buffer(data, size), zmq::send_flags::none);
}

}  // namespace slowpipe::runtime
