#include "vt/cpu/backend.h"

namespace vt::cpu {

void RegisterKernels() {
  RegisterQuantKernels();
  RegisterMatmulKernels();
  RegisterNormKernels();
  RegisterActivationKernels();
  RegisterCastKernels();
  RegisterFusedKernels();
  RegisterModelKernels();
  RegisterSamplingKernels();
}

}  // namespace vt::cpu
