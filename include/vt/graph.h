// Recorded queue work, replayed with one launch (CUDA graphs).
//
//   vt::Graph g = vt::Graph::Capture(q, [&] { ...ops on q... }, &why_not);
//   if (g.defined()) g.Replay(); else ...run the ops...;
//
// Capture records what the function enqueues on q without running it; Replay enqueues the
// recorded work on q again, with the same tensors: their addresses are part of the record,
// so they must outlive the graph, and a step's new inputs are written into those tensors
// before Replay. Memory that the recorded ops allocate and free again stays with the graph
// (nothing else is given those bytes while it lives). Only CUDA queues record; on any other
// queue, or when the work holds something a graph cannot (a copy to the host, a host
// synchronization), Capture returns an undefined Graph and says why in *why_not.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "vt/queue.h"

namespace vt {

// A backend's recorded work.
struct GraphImpl {
  virtual ~GraphImpl() = default;
  virtual void Replay() = 0;
};

class Graph {
 public:
  Graph() = default;
  static Graph Capture(const Queue& q, const std::function<void()>& fn, std::string* why_not = nullptr);

  bool defined() const { return impl_ != nullptr; }
  // Enqueues the recorded work on the queue it was recorded on.
  void Replay() const;

 private:
  explicit Graph(std::shared_ptr<GraphImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<GraphImpl> impl_;
};

}  // namespace vt
