// Quantizes a few values through the public API and checks them against e4m3fn codes
// worked out by hand from the format (bias 7, 3 mantissa bits).
#include <cstdint>
#include <cstdio>
#include <vt/vt.h>

int main() {
  vt::Queue q = vt::Queue::Cpu(1);
  // With input_scale 0.5 (inv = 2): 1.0 -> 2.0 = 0x40; -0.75 -> -1.5 = 0xBC; 1000 -> 448 = 0x7E;
  // 0.0 -> 0x00; 2^-10 -> 2^-9 (smallest subnormal) = 0x01.
  const float x[5] = {1.0f, -0.75f, 1000.0f, 0.0f, 0x1p-10f};
  const uint8_t want[5] = {0x40, 0xBC, 0x7E, 0x00, 0x01};
  vt::Tensor xt = vt::Tensor::FromHost(x, {5}, vt::DType::kF32);
  vt::Tensor out = vt::Tensor::Empty({5}, vt::DType::kF8E4M3);
  vt::QuantFp8Static(q, out, xt, 0.5f);
  uint8_t got[5];
  out.CopyToHost(got);
  int bad = 0;
  for (int i = 0; i < 5; ++i) {
    if (got[i] != want[i]) {
      std::printf("x=%g: got 0x%02x want 0x%02x\n", x[i], got[i], want[i]);
      ++bad;
    }
  }
  std::printf("consumer: %d of 5 values wrong; MatmulFp8 on cpu registered: %d\n", bad,
              vt::OpRegistered(vt::OpId::kMatmulFp8, vt::DeviceType::kCPU));
  return bad == 0 ? 0 : 1;
}
