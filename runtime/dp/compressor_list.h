// The registered gradient compressors (runtime/dp/gradient_compressor.h), one line each: both
// halves of a compressor are registered by its line, so they cannot be listed apart or matched by
// the wrong name.
//   X(name, namedInCodec, parse, makeSync)
//     name          GradientCompressor::name(), and its dp.codec prefix where namedInCodec;
//     parse         its torch-free description (runtime/dp/compressors/<name>.cc), expanded by
//                   runtime/dp/compressors/registry.cc into gradientCompressors();
//     makeSync      its torch side (runtime/dp/grad_syncs/<name>.cc), expanded by
//                   runtime/dp/grad_syncs/registry.cc into gradientSyncs().
// A new compressor: its two files, one line here, and tests.
#pragma once

#define SLOWPIPE_GRADIENT_COMPRESSORS(X)                     \
  X("codec", false, parseCodecCompressor, makeMeanGradients) \
  X("powersgd", true, parsePowerSgd, makePowerSgdSync)       \
  X("qadam", true, parseQadam, makeQadamSync)                \
  X("diloco", false, parseDiloco, makeDilocoSync)
