// The message of the vt::Error a call throws, or "<no error>" (shared by the vt and vt_cuda
// tests that check an error names the op, argument or value).
#pragma once

#include <string>

#include "vt/error.h"

namespace vtt {

template <typename Fn>
std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const vt::Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace vtt
