#include "serving/grpc_message_pool.h"

#include <utility>

namespace grove::serving {

// Note [gRPC messages reused]
// By default gRPC's callback API makes a new request and response message
// per call and deletes them after it: a ModelInfer parse allocates the
// message, its input tensor, their strings and the raw contents' bytes, and
// the answer its output tensor and raw bytes, each freed again once the call
// is done, often on another thread. The front registers this pool as the
// ModelInfer allocator instead: a released pair is cleared (protobuf keeps the
// capacity of cleared strings and repeated fields) and handed to the next
// call, which parses into it. A pair whose messages grew past max_kept_bytes
// (a large request) is freed rather than kept, and at most max_kept pairs
// wait, so the pool holds at most about max_kept x max_kept_bytes. Tests:
// InferMessagePool.* (tests/serving/grpc_server_test.cc), every ModelInfer
// test there.
class InferMessagePool::Pair : public Holder {
 public:
  explicit Pair(InferMessagePool* pool) : pool_(pool) {
    set_request(&request_);
    set_response(&response_);
  }
  void Release() override { pool_->give_back(this); }
  // The request may go before the call ends; gRPC calls this when the
  // handler asks (the front does not), so only its contents are dropped.
  void FreeRequest() override { request_.Clear(); }
  // Bytes the pair's messages hold now (before clearing: what they grew to).
  size_t bytes() const { return request_.ByteSizeLong() + response_.ByteSizeLong(); }
  void clear() {
    request_.Clear();
    response_.Clear();
  }

 private:
  InferMessagePool* pool_;
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
};

InferMessagePool::InferMessagePool(size_t max_kept, size_t max_kept_bytes)
    : max_kept_(max_kept), max_kept_bytes_(max_kept_bytes) {}

InferMessagePool::~InferMessagePool() = default;

InferMessagePool::Holder* InferMessagePool::AllocateMessages() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!kept_.empty()) {
      Pair* pair = kept_.back().release();
      kept_.pop_back();
      return pair;
    }
    ++allocated_;
  }
  return new Pair(this);
}

void InferMessagePool::give_back(Pair* pair) {
  std::unique_ptr<Pair> owned(pair);
  if (owned->bytes() > max_kept_bytes_) return;  // freed: it would keep a large capacity
  owned->clear();
  std::lock_guard<std::mutex> lock(mutex_);
  if (kept_.size() < max_kept_) kept_.push_back(std::move(owned));
}

size_t InferMessagePool::kept() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.size();
}

size_t InferMessagePool::allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

}  // namespace grove::serving
