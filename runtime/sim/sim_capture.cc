#include "runtime/sim/sim_capture.h"

#include <algorithm>

#include "runtime/error.h"

namespace grove::runtime::sim {
namespace {

// A stream that joined a capture must have been joined back into the origin
// stream (the origin waited on an event recorded after its last work).
std::string find_unjoined_stream(const Capture& capture) {
  std::vector<bool> reachable(capture.graph.nodes.size(), false);
  std::vector<size_t> pending = capture.origin->frontier;
  while (!pending.empty()) {
    size_t node = pending.back();
    pending.pop_back();
    if (reachable[node]) continue;
    reachable[node] = true;
    for (size_t dependency : capture.graph.nodes[node].dependencies) pending.push_back(dependency);
  }
  for (SimStream* member : capture.streams) {
    for (size_t node : member->frontier) {
      if (!reachable[node]) {
        return "a stream that joined the capture was not joined back into the origin stream "
               "before end_capture (record an event on it and wait on it from the origin)";
      }
    }
  }
  return "";
}

}  // namespace

void CaptureRegistry::begin(SimStream& origin, CaptureMode mode) {
  auto capture = std::make_unique<Capture>();
  capture->mode = mode;
  capture->thread = std::this_thread::get_id();
  capture->origin = &origin;
  capture->streams.insert(&origin);
  origin.capture = capture.get();
  origin.frontier.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  captures_.push_back(std::move(capture));
}

std::unique_ptr<Capture> CaptureRegistry::end(SimStream& origin) {
  Capture* capture = origin.capture;
  if (!capture->invalidated) {
    std::string unjoined = find_unjoined_stream(*capture);
    if (!unjoined.empty()) {
      capture->invalidated = true;
      capture->reason = unjoined;
    }
  }
  for (SimStream* member : capture->streams) {
    member->capture = nullptr;
    member->frontier.clear();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(captures_.begin(), captures_.end(),
                         [&](const auto& c) { return c.get() == capture; });
  std::unique_ptr<Capture> owned = std::move(*it);
  captures_.erase(it);
  return owned;
}

void CaptureRegistry::check_usable(const Capture* capture) const {
  GROVE_CHECK_AS(CaptureViolation, !capture->invalidated,
                 "work submitted to a stream whose capture was invalidated (", capture->reason,
                 "); end the capture to make the stream usable again");
}

void CaptureRegistry::violate(Capture* capture, const std::string& what) const {
  if (!capture->invalidated) {
    capture->invalidated = true;
    capture->reason = what;
  }
  throw CaptureViolation(str_cat(what, " is not allowed on ", device_.str(),
                                 " (CUDA would fail with cudaErrorStreamCaptureUnsupported); "
                                 "the capture is invalidated"));
}

void CaptureRegistry::forbid(const std::string& what) {
  Capture* forbidding = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& capture : captures_) {
      bool applies =
          capture->mode == CaptureMode::kGlobal || (capture->mode == CaptureMode::kThreadLocal &&
                                                    capture->thread == std::this_thread::get_id());
      if (applies && !capture->invalidated) {
        forbidding = capture.get();
        break;
      }
    }
  }
  if (forbidding != nullptr) violate(forbidding, what);
}

}  // namespace grove::runtime::sim
