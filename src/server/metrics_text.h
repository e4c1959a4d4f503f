// The engine's metrics as Prometheus text exposition (format 0.0.4), under vLLM's names and
// types, each sample labelled model_name, so vLLM's dashboards read them unchanged.
//
// Written by hand rather than with prometheus-cpp: the engine already keeps the values (one
// snapshot per scrape, no registry to mirror them into), the format is a few lines per
// family, and one less dependency for the installed package.
#pragma once

#include <string>

#include "engine/metrics.h"

namespace vtllm::server {

std::string MetricsText(const engine::EngineMetrics& m, const std::string& model_name);

// A label value with Prometheus' escapes (backslash, double quote, newline).
std::string EscapeLabelValue(const std::string& v);

}  // namespace vtllm::server
