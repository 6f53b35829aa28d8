// The torch door's hand-out of a graph's outputs over storage the binding
// caches (Note [Outputs over cached storage] below): the run that releases
// the previous call's references and names each output by an exact key, and
// the unowned DLPack view a binding caches.
//
// Note [Outputs over cached storage]
// A replay writes its outputs at the same addresses every time, yet a
// DLPack hand-out makes PyTorch build a new storage (a capsule, a deleter
// context, a device lookup) per output per call. Instead the binding
// (python/grove/cached_outputs.py) keeps one torch tensor per output key
// (OutputKeys: address, device, dtype, shape, strides), made once from an
// unowned DLPack view (grove_dlpack_unowned: it holds no reference, so the
// cache never counts as a holder), and hands out a new tensor object over
// that cached tensor's storage per call. What tells the tree that someone
// still holds an output is unchanged: the call's DLManagedTensor (one
// reference to grove's storage, Note [Output liveness]) is kept by the
// binding, not by PyTorch, and released at the model's next call
// (grove_model_run_handout's `release`, before the run) only when no tensor
// but the cached one uses the torch storage; a storage someone holds keeps
// its reference, leaves the cache (the next hand-out gets a storage of its
// own) and is checked after each later call with grove_dlpack_check, as
// Note [Kept outputs through DLPack] does. So a replay that overwrites a held
// output still retires it, and the held torch tensor is poisoned through
// PyTorch's storage hook. Measured (session 19, r1, an H200, GPT-2 b1):
// Model.call_torch in a loop 17.9 us with this hand-out against 19.5 us
// through DLPack; the door rows drifted by more than that over the run
// (benchmarks/door_call_layers.py --ab times the two in turns).
// Tests: CachedOutputsTest (tests/python/cached_outputs_test.py),
// CApi.HandoutKeysNameOutputsExactly (tests/capi/capi_test.cc).
#include <memory>
#include <optional>
#include <vector>

#include "capi/api_support.h"

using grove::capi::require;
using grove::capi::run_api;

namespace {

// What an unowned DLManagedTensor keeps: its shape and strides only.
struct UnownedDlpack {
  std::vector<int64_t> extents;  // the shape, then the strides
  DLManagedTensor managed{};
};

void delete_unowned(DLManagedTensor* managed) {
  delete static_cast<UnownedDlpack*>(managed->manager_ctx);
}

const DLManagedTensor* grove_made(const void* pointer, const char* what) {
  require(pointer != nullptr, what, " is null");
  const auto* managed = static_cast<const DLManagedTensor*>(pointer);
  require(grove::capi::made_by_grove(managed), what,
          " was not made by grove (its deleter is another's)");
  return managed;
}

}  // namespace

extern "C" {

grove_status grove_model_run_handout(grove_model* model, uint64_t invocation_key,
                                     void* const* release, size_t release_count,
                                     const grove_tensor_desc* inputs, size_t input_count,
                                     void* stream, void** managed, uint64_t* keys, size_t capacity,
                                     size_t* count) {
  grove_status released = run_api("grove_model_run_handout", [&] {
    require(release != nullptr || release_count == 0, release_count,
            " references to release but the `release` array is null");
    for (size_t i = 0; i < release_count; ++i) {
      grove_made(release[i], "a reference to release");
    }
    for (size_t i = 0; i < release_count; ++i) {
      auto* reference = static_cast<DLManagedTensor*>(release[i]);
      reference->deleter(reference);
    }
    require(keys != nullptr || capacity == 0, "capacity ", capacity,
            " but the `keys` array is null");
  });
  if (released != GROVE_OK) {
    grove::capi::release_all(inputs, input_count, 0);
    return released;
  }
  std::optional<uint64_t> key;
  if (invocation_key != GROVE_NO_INVOCATION) {
    key = invocation_key;
  }
  return grove::capi::run_dlpack("grove_model_run_handout", model, key, inputs, input_count, stream,
                                 managed, keys, capacity, count);
}

grove_status grove_dlpack_unowned(const void* managed_tensor, void** unowned) {
  return run_api("grove_dlpack_unowned", [&] {
    require(unowned != nullptr, "the output pointer `unowned` is null");
    const DLManagedTensor* source = grove_made(managed_tensor, "the DLManagedTensor");
    const DLTensor& from = source->dl_tensor;
    auto view = std::make_unique<UnownedDlpack>();
    const auto rank = static_cast<size_t>(from.ndim);
    view->extents.assign(from.shape, from.shape + rank);
    view->extents.insert(view->extents.end(), from.strides, from.strides + rank);
    DLTensor& to = view->managed.dl_tensor;
    to = from;
    to.shape = view->extents.data();
    to.strides = view->extents.data() + rank;
    view->managed.manager_ctx = view.get();
    view->managed.deleter = delete_unowned;
    *unowned = &view.release()->managed;
  });
}

grove_status grove_dlpack_release(void* const* managed, size_t count) {
  return run_api("grove_dlpack_release", [&] {
    require(managed != nullptr || count == 0, count, " references but the array is null");
    for (size_t i = 0; i < count; ++i) {
      grove_made(managed[i], "a reference to release");
    }
    for (size_t i = 0; i < count; ++i) {
      auto* reference = static_cast<DLManagedTensor*>(managed[i]);
      reference->deleter(reference);
    }
  });
}

}  // extern "C"
