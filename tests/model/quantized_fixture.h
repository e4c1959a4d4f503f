// A fixture checkpoint as `vtllm quantize` writes it in static FP8 (QuantizeCheckpoint), with
// one short calibration window, for the tests that load it on another backend.
#pragma once

#include <string>

#include "model/quantize.h"

namespace vtllm::model::testing {

// format: "modelopt" or "compressed-tensors".
inline void QuantizeStaticFp8(const std::string& src, const std::string& out, const std::string& format) {
  QuantizeOptions qo;
  qo.format = format;
  qo.progress = false;
  qo.cpu_threads = 2;
  qo.calibration = {{1, 5, 9, 200, 17, 33, 2, 300, 41, 7, 99, 150, 3, 8, 12, 64}};
  QuantizeCheckpoint(src, out, qo);
}

}  // namespace vtllm::model::testing
