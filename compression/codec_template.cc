#include "compression/codec_template.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

namespace slowpipe::compression {
namespace templates {
const std::map<std::string, std::string>& all();  // codec_templates.cc
}

namespace {

std::string fill(std::string text, const std::string& name) {
  std::string cls;
  bool up = true;
  for (char c : name) {
    if (c == '_') {
      up = true;
      continue;
    }
    cls += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"@NAME@", name}, {"@CLASS@", cls}})
    for (size_t at = text.find(key); at != std::string::npos;
         at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  return text;
}

}  // namespace

std::vector<std::string> writeCodecSkeleton(const std::string& name, const std::string& lang,
                                            const std::string& dir) {
  bool ok = !name.empty() && name.size() <= 32 && std::islower(static_cast<unsigned char>(name[0]));
  for (char c : name)
    ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                std::isdigit(static_cast<unsigned char>(c)) || c == '_');
  if (!ok)
    throw std::invalid_argument("codec new: name '" + name +
                                "': expected a lower-case C identifier of 1-32 characters "
                                "(a-z first, then a-z, 0-9, _)");
  std::map<std::string, std::string> files;  // file name -> template
  if (lang == "c")
    files = {{name + ".c", "codec.c"}, {"CMakeLists.txt", "CMakeLists.c"}};
  else if (lang == "cpp")
    files = {{name + ".cc", "codec.cc"}, {"CMakeLists.txt", "CMakeLists.cpp"}};
  else if (lang == "torchscript")
    files = {{name + ".py", "codec.py"}};
  else
    throw std::invalid_argument("codec new: --lang '" + lang + "': expected c, cpp or torchscript");
  const std::filesystem::path folder = std::filesystem::path(dir) / name;
  if (std::filesystem::exists(folder))
    throw std::invalid_argument("codec new: '" + folder.string() +
                                "' exists; choose another name or --dir (nothing is overwritten)");
  std::filesystem::create_directories(folder);
  std::vector<std::string> written;
  for (const auto& [file, tpl] : files) {
    const std::filesystem::path path = folder / file;
    std::ofstream out(path, std::ios::binary);
    out << fill(templates::all().at(tpl), name);
    out.close();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove_all(folder, ec);
      throw std::runtime_error("codec new: could not write '" + path.string() + "'");
    }
    written.push_back(path.string());
  }
  return written;
}

std::string codecSkeletonNextSteps(const std::string& name, const std::string& lang,
                                   const std::string& folder, const std::string& prefix,
                                   const std::string& cli) {
  if (lang == "torchscript")
    return "  /usr/bin/python3 " + folder + "/" + name + ".py " + folder + "/" + name + ".pt\n" +
           "  " + cli + " codec check torchscript:path=" + folder + "/" + name + ".pt,bits=8\n" +
           "  " + cli + " codec check torchscript:path=" + folder + "/" + name +
           ".pt,bits=4,ef=1\n";
  const std::string where = prefix.empty() ? "<slowpipe prefix>" : prefix;
  std::string out = "  cmake -S " + folder + " -B " + folder +
                    "/build -DCMAKE_PREFIX_PATH=" + where + " && cmake --build " + folder +
                    "/build\n  " + cli + " codec check plugin:path=" + folder + "/build/lib" +
                    name + ".so,bits=8\n";
  if (prefix.empty())
    out +=
        "(<slowpipe prefix>: the build folder this CLI was built in, or where `cmake --install "
        "BUILD --prefix P` put it)\n";
  return out;
}

}  // namespace slowpipe::compression
