#include "model/load_error.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace vtllm::model {

std::string DescribeJson(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  if (value.is_null()) return "null";
  return vt::StrCat(value.type_name(), " ", text);
}

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ThrowLoadError(path, ": cannot open file");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) ThrowLoadError(path, ": read error");
  try {
    return nlohmann::json::parse(buf.str());
  } catch (const nlohmann::json::parse_error& e) {
    ThrowLoadError(path, ": not valid JSON (", e.what(), ")");
  }
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace vtllm::model
