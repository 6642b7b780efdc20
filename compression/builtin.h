// Built-in codecs in the registry's form: a codec is its own file(s), defining the class and a
// registration (BuiltinCodec: its spec name, its wire id, its parameters, whether it has a device
// path, a factory), and one line in registry.cc's list. makeCodec, codecNames, codecName and the
// frame's check of codec ids all read the list; nothing else names the codec. (The older built-ins
// still sit in registry.cc's chain and the CodecId enum; randk is the first moved.)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compression/codec.h"

namespace slowpipe::compression {

// A spec's parameters, key -> value, every key one the codec lists.
using CodecParams = std::map<std::string, std::string>;

struct BuiltinCodec {
  std::string name;   // the spec's name: "randk" in randk:ratio=0.1
  uint16_t wireId;    // in every frame's header: fixed once given, unique (checked at start)
  std::string usage;  // for help texts and errors, e.g. "randk:ratio=R[,seed=S]"
  bool devicePath;    // compression/cuda/device_codec.h has a device codec for it
  std::vector<std::string> keys;  // the parameters it accepts
  std::unique_ptr<Codec> (*make)(const CodecParams& params, const std::string& instance);
};

// Whether the CodecId enum names this id (the built-ins not yet in the registry's form).
bool isEnumCodecId(uint16_t id);

// Every registered built-in, ids checked for clashes (with each other and the enum's).
const std::vector<BuiltinCodec>& builtinCodecs();
const BuiltinCodec* builtinCodecById(uint16_t wireId);  // null: none

// Parameter readers for factories: an integer (default when absent), a required ratio; errors
// name the codec, the key and the value.
int64_t intParam(const std::string& codec, const CodecParams& p, const std::string& key,
                 int64_t dflt);
double ratioParam(const std::string& codec, const CodecParams& p);

}  // namespace slowpipe::compression
