#include "vt/prepared.h"

#include <array>

#include "vt/ops/check.h"
#include "vt/registry.h"

namespace vt {

namespace {
// Function-local, one slot per device type and use; filled by the backends' RegisterKernels
// (under EnsureBackendsRegistered's once), read after.
using PreparerSlots = std::array<std::array<WeightPreparerFn*, kNumWeightUses>, kNumDeviceTypes>;
PreparerSlots& Preparers() {
  static PreparerSlots slots{};
  return slots;
}
}  // namespace

const char* WeightUseName(WeightUse use) {
  switch (use) {
    case WeightUse::kMatmulB:
      return "matmul b";
    case WeightUse::kMatmulGroupScaledB:
      return "group-scaled matmul b";
  }
  return "?";
}

void RegisterWeightPreparer(DeviceType device, WeightUse use, WeightPreparerFn* fn) {
  Preparers()[static_cast<int>(device)][static_cast<int>(use)] = fn;
}

Tensor PrepareWeight(const Queue& q, const Tensor& w, WeightUse use, std::span<const int64_t> row_starts) {
  constexpr std::string_view op = "PrepareWeight";
  check::OnQueue(op, q, "w", w);
  check::Contiguous(op, "w", w);
  VT_CHECK(w.read_only(), op, ": w ", w.Describe(), " must be read-only (Tensor::SetReadOnly)");
  VT_CHECK(!w.bytes_released(), op, ": the bytes of w ", w.Describe(), " were released (Tensor::ReleaseBytes)");
  VT_CHECK(w.backend_layout() == nullptr, op, ": w ", w.Describe(), " is already prepared");
  switch (use) {
    case WeightUse::kMatmulB:
    case WeightUse::kMatmulGroupScaledB:
      check::NDim(op, "w", w, 2);
      break;
  }
  for (size_t i = 0; i < row_starts.size(); ++i)
    VT_CHECK(row_starts[i] >= 0 && row_starts[i] <= w.dim(0) && (i == 0 || row_starts[i] > row_starts[i - 1]), op,
             ": row_starts[", i, "] = ", row_starts[i], " is not an increasing row of w ", w.Describe());
  EnsureBackendsRegistered();
  WeightPreparerFn* fn = Preparers()[static_cast<int>(q.device().type)][static_cast<int>(use)];
  return fn != nullptr ? fn(q, w, use, row_starts) : w;
}

}  // namespace vt
