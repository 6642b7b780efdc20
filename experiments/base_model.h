// The base model a sweep fine-tunes: given (`--base CKPT`), or pretrained once per content and
// cached. A base is keyed by what makes it: the pretraining run's model, data and training sections
// (after the sweep's "pretrain" overrides), the micro-batching, the threads it trains with, and the
// content of the corpus files it reads (so an edited corpus is another base). The cache folder is
//   SweepOptions::cacheDir, else $SLOWPIPE_CACHE_DIR, else $XDG_CACHE_HOME/slowpipe, else
//   $HOME/.cache/slowpipe         ("off" for either: no cache, pretrain every time)
// and holds bases/<key>/{base.pt, pretrain_log.json, key.json}. A sweep copies the cached base into
// its folder (DIR/base.pt, as before), so its runs' identity and resume do not depend on the cache.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "experiments/sweep.h"

namespace slowpipe::experiments {

// The cache folder for `given` (a --cache-dir, may be empty); "" when caching is off.
std::string baseCacheDir(const std::string& given);
// What a sweep's base is keyed by (see above), and the key (16 hex digits).
nlohmann::json baseKeyContent(const SweepSpec& spec);
std::string baseKey(const nlohmann::json& content);

// DIR/<pretrain.checkpoint> (default base.pt) for the sweep: left as it is when present, else
// copied from the cache, else pretrained (progress with ETA on stderr) and stored in the cache.
// Says which on stdout. Returns the checkpoint's path.
std::string prepareBase(const SweepSpec& spec, const std::string& outDir,
                        const std::string& cacheDir);

}  // namespace slowpipe::experiments
