// vt::Error and the checks that throw it. Every message names what the user can act on:
// the op, the argument, the actual values.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace vt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Concatenates its arguments with operator<< into a message.
template <typename... Args>
std::string StrCat(Args&&... args) {
  return detail::StrCat(std::forward<Args>(args)...);
}

}  // namespace vt

// VT_CHECK(cond, parts...): throws vt::Error(StrCat(parts...)) when cond is false.
#define VT_CHECK(cond, ...)                                   \
  do {                                                        \
    if (!(cond)) throw ::vt::Error(::vt::StrCat(__VA_ARGS__)); \
  } while (0)
