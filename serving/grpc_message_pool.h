// InferMessagePool is the gRPC front's allocator of ModelInfer messages: each
// call's request and response come from a pool of cleared ones and go back to
// it when gRPC releases them, so that a call parses into strings and repeated
// fields that already have their capacity instead of allocating and freeing
// them (Note [gRPC messages reused]).
//
//   InferMessagePool pool;
//   service.SetMessageAllocatorFor_ModelInfer(&pool);  // before the server starts
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "serving/kserve_v2_grpc.grpc.pb.h"

namespace grove::serving {

class InferMessagePool
    : public grpc::MessageAllocator<inference::ModelInferRequest, inference::ModelInferResponse> {
 public:
  using Holder = grpc::MessageHolder<inference::ModelInferRequest, inference::ModelInferResponse>;

  // At most `max_kept` cleared pairs wait in the pool, and a pair whose
  // messages held more than `max_kept_bytes` is freed instead of kept.
  explicit InferMessagePool(size_t max_kept = 1024, size_t max_kept_bytes = size_t{64} << 10);
  ~InferMessagePool() override;

  // grpc::MessageAllocator: a cleared pair, reused if one waits. Any thread.
  Holder* AllocateMessages() override;

  size_t kept() const;       // pairs waiting in the pool now
  size_t allocated() const;  // pairs made so far (not reused)

 private:
  class Pair;
  void give_back(Pair* pair);

  const size_t max_kept_;
  const size_t max_kept_bytes_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Pair>> kept_;
  size_t allocated_ = 0;
};

}  // namespace grove::serving
