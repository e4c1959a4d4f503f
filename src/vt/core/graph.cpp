#include "vt/graph.h"

#include "vt/error.h"

namespace vt {

std::shared_ptr<GraphImpl> Queue::Impl::CaptureGraph(const std::function<void()>& fn, std::string* why_not) {
  (void)fn;
  if (why_not) *why_not = StrCat("a queue on ", ToString(device), " records no graphs");
  return nullptr;
}

Graph Graph::Capture(const Queue& q, const std::function<void()>& fn, std::string* why_not) {
  return Graph(q.impl()->CaptureGraph(fn, why_not));
}

void Graph::Replay() const {
  VT_CHECK(impl_ != nullptr, "Graph::Replay: an undefined graph");
  impl_->Replay();
}

}  // namespace vt
