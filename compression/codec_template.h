// `slowpipe codec new NAME --lang c|cpp|torchscript [--dir DIR]`: a codec skeleton that builds and
// passes `slowpipe codec check` as generated, with the contract's rules as comments. C and C++: a
// plug-in (NAME.c / NAME.cc) and its CMakeLists.txt against the installed package
// (find_package(slowpipe), target slowpipe::codec). TorchScript: NAME.py, which saves NAME.pt with
// Debian's python3-torch, with exact byte-view helpers and an error-feedback option per key.
#pragma once

#include <string>
#include <vector>

namespace slowpipe::compression {

// Writes the skeleton into DIR/NAME/ (created; an existing DIR/NAME is an error, so nothing is
// overwritten) and returns the paths written. NAME: a C identifier in lower case, 1-32 characters.
std::vector<std::string> writeCodecSkeleton(const std::string& name, const std::string& lang,
                                            const std::string& dir);
// What to run next for a skeleton of `lang` written at `folder` (build, check, use).
// `prefix`: where find_package(slowpipe) finds the SDK (a build folder or an install prefix; empty:
// unknown, a placeholder is printed); `cli`: the slowpipe binary the checks run.
std::string codecSkeletonNextSteps(const std::string& name, const std::string& lang,
                                   const std::string& folder, const std::string& prefix = "",
                                   const std::string& cli = "slowpipe");

}  // namespace slowpipe::compression
