// The default calibration text of `vtllm quantize` (calibration_text.cpp).
#pragma once

namespace vtllm::cli {

const char* BuiltinCalibrationText();

}  // namespace vtllm::cli
