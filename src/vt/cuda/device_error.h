// Index errors found by kernels. The model ops (Embedding, RotaryEmbedding, KvCacheWrite,
// PagedAttention) take index metadata that lives on the device; reading it back to check
// it on the host cost one stream synchronization per op (a Qwen3-0.6B decode step did 140
// of them). Instead each kernel checks the indices it uses, skips any access they would
// make out of bounds, and records the first bad one in a per-device record; the host
// reads the record at the next synchronization point (Queue::Synchronize, a copy to the
// host) and throws vt::Error naming the op, the argument and the value, then clears the
// record so the queue keeps serving. The output of the op that failed is unspecified.
#pragma once

#include <cstdint>

namespace vt::cuda {

enum class IndexError : unsigned long long {
  kNone = 0,
  kEmbeddingId,          // index = t, value = ids[t], bound = table rows
  kRopePosition,         // index = t, value = positions[t], bound = cache positions
  kKvSlot,               // index = t, value = slot_mapping[t], bound = cache slots
  kAttnQueryStartRange,  // index = first/last entry (0 or S), value = its value, bound = T
  kAttnQueryStartOrder,  // index = s, value = query_start_loc[s + 1], aux = query_start_loc[s]
  kAttnQueryRows,        // index = s, value = seq_lens[s], aux = new query rows
  kAttnSeqLen,           // index = s, value = seq_lens[s], bound = table entries, aux = block size
  kAttnBlockId,          // index = s, aux = block position, value = id, bound = cache blocks
  kMoeExpertId,          // index = element of ids, value = ids[index], bound = experts
  kGdnQueryStart,        // index = entry of query_start, value = its value, bound = T, aux = entry before
  kGdnStateSlot,         // index = s, value = state_slots[s], bound = state slots
};

struct IndexErrorRecord {
  unsigned long long code;  // IndexError; 0 = none
  long long index, value, bound, aux;
};

// The record of `device` (zeroed device memory, allocated on first use).
IndexErrorRecord* IndexErrors(int device);
// Reads the record of `device` (a device-to-host copy after the work issued so far on
// the legacy stream and on blocking streams); throws vt::Error describing it, after
// clearing it, if a kernel recorded an error. No-op before the first IndexErrors(device).
void ThrowPendingIndexError(int device);

}  // namespace vt::cuda
