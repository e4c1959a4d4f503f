// The persistent decode-step measurement (cuda_fp8_bench --persistent): shapes, the kernel's
// parameters and the host reference, shared by cuda_persistent_floor.cu (the device code)
// and cuda_persistent_floor_run.cu (the host reference and the timed runs).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace persistent_floor {

// Qwen3-0.6B widths.
constexpr int kLayers = 28, kHidden = 1024, kHeads = 16, kKvHeads = 8, kHeadDim = 128;
constexpr int kQkv = (kHeads + 2 * kKvHeads) * kHeadDim;  // 4096
constexpr int kAttnOut = kHeads * kHeadDim;                // 2048
constexpr int kInter = 3072, kVocab = 151936;
constexpr int kThreads = 1024;
constexpr int64_t kQkvBytes = int64_t{kQkv} * kHidden, kOBytes = int64_t{kHidden} * kAttnOut;
constexpr int64_t kGuBytes = int64_t{2} * kInter * kHidden, kDownBytes = int64_t{kHidden} * kInter;
constexpr int64_t kLayerBytes = kQkvBytes + kOBytes + kGuBytes + kDownBytes;  // 15 MiB
constexpr int kMaxCtx = 1024;
// One scale for each kind of GEMV input and one for every weight.
constexpr float kWScale = 1.0f / 32, kXScale = 1.0f / 64, kAttnScale = 1.0f / 256, kActScale = 1.0f / 128;
constexpr float kEps = 1e-6f, kRopeTheta = 1000000.0f;

struct Params {
  const uint8_t* w;        // kLayers x kLayerBytes: qkv [4096][1024], o [1024][2048], gate/up per CTA, down [1024][3072]
  const float* norm_w;     // kLayers x 2 x kHidden (input, post-attention)
  const uint16_t* lm_head; // [kVocab][kHidden] BF16, or null
  const float* final_norm; // kHidden
  uint16_t* k_cache;       // kLayers x kMaxCtx x kKvHeads x kHeadDim, BF16
  uint16_t* v_cache;
  const float* h_in;       // the step's input row (the embedding), kept
  float* h;                // the residual row
  float* qkv;              // kQkv
  uint8_t* attn_codes;     // kAttnOut
  uint8_t* act_codes;      // kInter
  float* logits;           // kVocab
  unsigned* barrier;       // zeroed before each launch (modes 0-2, 4)
  uint64_t* flags;         // mode 3: (kLayers + 1) x kFlagWords words {payload, tag}
  unsigned* epoch;         // mode 3: steps run so far; a step's words carry epoch + 1
  int ctx;                 // tokens already cached; the new one goes to position ctx
  // 0: grid barriers only; 1: work, each weight copied after its stage starts; 2: work,
  // copied a layer ahead; 3: as 2, but no grid barriers: every value another CTA reads is
  // a 64-bit word of payload and the step's tag, polled until the tag matches, and the
  // attention CTAs copy their context into shared memory at the layer's start; 4: grid
  // barriers only, without the fences around the release/acquire pair; 5: mode 3 with
  // the GEMVs' products left out (zeros published): the hand-overs' own cost.
  int mode;
  int light;    // modes 1-2: grid barriers without the fences (as mode 4)
  int mma;      // the GEMVs on the tensor cores (SmemGemvMma)
  int kv_smem;  // modes 1-2: the attention CTAs copy their context into shared memory as mode 3 does
  // modes 1-2: the residual row and the o_proj and down inputs written in this many copies
  // (0 or 1: one), CTA c reading copy c % replicas: fewer CTAs on each L2 line
  int replicas;
};
constexpr int kMaxReplicas = 16;

// Mode 3's words of a layer: its input row, q/k/v, the attention's codes (4 a word), the
// residual after o_proj, the SiLU-mul codes (1 a word). Layer kLayers' input row is the
// final one.
constexpr int kFlagH = 0, kFlagQkv = kHidden, kFlagAttn = kFlagQkv + kQkv, kFlagMid = kFlagAttn + kAttnOut / 4;
constexpr int kFlagAct = kFlagMid + kHidden, kFlagWords = kFlagAct + kInter;
constexpr int kKvSmemTokens = 176;  // mode 3 copies a context of up to this many tokens into shared memory

// The kernel's math on the host, from the same weights (one step at context ctx).
struct HostModel {
  std::vector<uint8_t> w;
  std::vector<float> norm_w, final_norm, h_in;
  std::vector<uint16_t> k_cache, v_cache, lm_head;
};

// One step of the kernel's math on the host (grid: the kernel's CTA count, for the gate/up layout).
void HostStep(HostModel& m, int ctx, int grid, std::vector<float>& h, std::vector<float>& logits);

// Bytes of dynamic shared memory the kernel takes with a grid of g CTAs.
size_t SmemBytes(int g);
// Allows that much shared memory and says how many CTAs fit an SM.
cudaError_t ConfigurePersistentStep(size_t smem, int* per_sm);
// One step: `grid` CTAs of kThreads, cooperative (co-resident) when asked.
cudaError_t LaunchPersistentStep(const Params& p, int grid, size_t smem, bool cooperative, cudaStream_t stream);
// Deterministic random weights, norms, input row and caches.
cudaError_t FillPersistentInputs(const Params& p, int64_t w_bytes, int64_t cache_elems);

}  // namespace persistent_floor
