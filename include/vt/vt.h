// Umbrella header of vt, vtllm's tensor-op layer.
#pragma once

#include "vt/device.h"
#include "vt/dtype.h"
#include "vt/error.h"
#include "vt/op_id.h"
#include "vt/ops/activation.h"
#include "vt/ops/attention.h"
#include "vt/ops/cast.h"
#include "vt/ops/embedding.h"
#include "vt/ops/fused.h"
#include "vt/ops/matmul.h"
#include "vt/ops/norm.h"
#include "vt/ops/quant.h"
#include "vt/ops/rope.h"
#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"
