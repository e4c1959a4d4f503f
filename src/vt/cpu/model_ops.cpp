// CPU kernels the model layer needs beyond linear algebra: embedding, rotary embedding,
// KV-cache writes and paged attention.
#include "vt/cpu/backend.h"

namespace vt::cpu {

void RegisterModelKernels() {}

}  // namespace vt::cpu
