#include "vt/cpu/backend.h"

namespace vt::cpu {

void RegisterKernels() {
  RegisterQuantKernels();
  RegisterMatmulKernels();
  RegisterNormKernels();
  RegisterActivationKernels();
  RegisterCastKernels();
  RegisterFusedKernels();
  RegisterEmbeddingKernels();
  RegisterRopeKernels();
  RegisterAttentionKernels();
  RegisterSamplingKernels();
  RegisterMoeKernels();
  RegisterGdnKernels();
}

}  // namespace vt::cpu
