// The C API's kept values (grove_model_run_keeping, grove_model_run_with_kept,
// grove_kept_*): a training step's saved activations handed from the forward
// to the backward inside grove, one call per stage.
#include <dlpack/dlpack.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capi/api_support.h"

using grove::capi::ModelCall;
using grove::capi::release_all;
using grove::capi::require;
using grove::capi::run_api;
using grove::capi::Subject;
using grove::capi::view_of;
using grove::runtime::Tensor;

// Note [Saved values kept in grove]
// A training step's forward returns the activations its backward reads. Made
// into framework tensors they cost a DLPack round trip each per step, and a
// check each before the backward. grove_model_run_keeping keeps them instead
// (the C++ tensors, one reference each) and hands the caller one *token*: a
// one-element int64 host tensor (DLPack) whose memory lives inside the kept
// set. The caller saves the token wherever it would have saved the activations
// (autograd's saved tensors); grove_model_run_with_kept finds the set again
// from the token's data pointer (only pointers of live sets are accepted),
// refuses a value a later replay overwrote (GROVE_ERROR_STALE;
// grove_kept_check names it) and passes the values to the backward as C++
// tensors. The set lives exactly as long as the token's memory: when the
// framework frees its last view of the token (autograd after the backward),
// the DLPack deleter frees the set and the tree sees the activations die, as
// it saw the DLPack tensors die before. Guarded by
// CApi.KeptValuesReachTheBackwardThroughAToken (tests/capi/capi_test.cc) and
// TrainingTest.test_saved_activations_cross_as_one_token (tests/python/training_test.py).
namespace {

struct KeptValues {
  int64_t token = 0;  // the token tensor's one element: the caller's tag
  int64_t token_shape = 1;
  int64_t token_stride = 1;
  std::vector<Tensor> values;
  DLManagedTensor managed{};
};

std::mutex& live_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The kept sets alive, by their token's address.
std::unordered_map<const void*, const KeptValues*>& live_sets() {
  static auto* sets = new std::unordered_map<const void*, const KeptValues*>();
  return *sets;
}

void delete_kept(DLManagedTensor* managed) {
  auto* kept = static_cast<KeptValues*>(managed->manager_ctx);
  {
    std::lock_guard<std::mutex> lock(live_mutex());
    live_sets().erase(&kept->token);
  }
  delete kept;
}

DLManagedTensor* make_token(std::vector<Tensor> values, int64_t tag) {
  auto kept = std::make_unique<KeptValues>();
  kept->token = tag;
  kept->values = std::move(values);
  DLTensor& dl = kept->managed.dl_tensor;
  dl.data = &kept->token;
  dl.device = {kDLCPU, 0};
  dl.ndim = 1;
  dl.dtype = {kDLInt, 64, 1};
  dl.shape = &kept->token_shape;
  dl.strides = &kept->token_stride;
  dl.byte_offset = 0;
  kept->managed.manager_ctx = kept.get();
  kept->managed.deleter = delete_kept;
  std::lock_guard<std::mutex> lock(live_mutex());
  live_sets().emplace(&kept->token, kept.get());
  return &kept.release()->managed;
}

// The values of the live set whose token is `token_data` (copies of the
// handles, taken under the lock so that a concurrent free cannot race).
std::vector<Tensor> values_of(const void* token_data) {
  std::lock_guard<std::mutex> lock(live_mutex());
  auto found = live_sets().find(token_data);
  require(token_data != nullptr && found != live_sets().end(),
          "the token is not a live kept set (pass the tensor grove_model_run_keeping returned, "
          "while it is alive)");
  return found->second->values;
}

bool readable(const Tensor& value) {
  const auto& storage = value.storage();
  return storage != nullptr && !storage->is_poisoned() && !storage->is_overwritten();
}

}  // namespace

extern "C" {

grove_status grove_model_run_keeping(grove_model* model, const grove_tensor_desc* inputs,
                                     size_t input_count, void* stream, const int64_t* handed,
                                     size_t handed_count, void** managed, const int64_t* kept,
                                     size_t kept_count, int64_t tag, void** token) {
  size_t viewed = 0;
  grove_status status = run_api("grove_model_run_keeping", [&] {
    require(token != nullptr, "the output pointer `token` is null");
    *token = nullptr;
    require(inputs != nullptr || input_count == 0, input_count, " inputs but the array is null");
    require(handed != nullptr || handed_count == 0, "handed_count ", handed_count,
            " but the `handed` array is null");
    require(kept != nullptr || kept_count == 0, "kept_count ", kept_count,
            " but the `kept` array is null");
    require(managed != nullptr || handed_count == 0, "the `managed` array is null");
    ModelCall call(model);
    grove_model& checked = call.model();
    for (size_t i = 0; i < handed_count + kept_count; ++i) {
      const int64_t index = i < handed_count ? handed[i] : kept[i - handed_count];
      require(index >= 0 && static_cast<size_t>(index) < checked.output_count, "output index ",
              index, " is out of range; the model has ", checked.output_count, " outputs");
    }
    grove::compiler::TensorList tensors;
    std::vector<grove::runtime::StoragePtr> borrowed;
    for (; viewed < input_count;) {
      const size_t index = viewed++;
      tensors.push_back(view_of(inputs[index], Subject{"input", index, nullptr}));
      if (inputs[index].release == nullptr) borrowed.push_back(tensors.back().storage());
    }
    grove::compiler::TensorList results = grove::capi::run_viewed(
        checked, std::move(tensors), borrowed, stream, checked.output_count);
    grove::compiler::TensorList out;
    out.reserve(handed_count);
    for (size_t i = 0; i < handed_count; ++i) out.push_back(results[handed[i]]);
    std::vector<Tensor> values;
    values.reserve(kept_count);
    for (size_t i = 0; i < kept_count; ++i) values.push_back(results[kept[i]]);
    results.clear();
    DLManagedTensor* made = kept_count != 0 ? make_token(std::move(values), tag) : nullptr;
    try {
      grove::capi::to_dlpack_all(out, managed);
    } catch (...) {
      if (made != nullptr) made->deleter(made);
      throw;
    }
    *token = made;
  });
  if (status != GROVE_OK) release_all(inputs, input_count, viewed);
  return status;
}

grove_status grove_model_run_with_kept(grove_model* model, const void* token_data,
                                       const int64_t* sources, size_t source_count,
                                       const grove_tensor_desc* inputs, size_t input_count,
                                       void* stream, void** managed, size_t capacity,
                                       size_t* count) {
  size_t viewed = 0;
  grove_status status = run_api("grove_model_run_with_kept", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = 0;
    require(sources != nullptr || source_count == 0, "the `sources` array is null");
    require(inputs != nullptr || input_count == 0, input_count, " inputs but the array is null");
    require(managed != nullptr || capacity == 0, "the `managed` array is null");
    ModelCall call(model);
    grove_model& checked = call.model();
    std::vector<Tensor> values = values_of(token_data);
    grove::compiler::TensorList tensors;
    tensors.reserve(source_count);
    std::vector<grove::runtime::StoragePtr> borrowed;
    for (size_t i = 0; i < source_count; ++i) {
      const std::string* name = i < checked.input_names.size() ? &checked.input_names[i] : nullptr;
      if (sources[i] >= 0) {
        const auto index = static_cast<size_t>(sources[i]);
        require(index < values.size(), "input ", i, ": kept value ", index,
                " is out of range; the set holds ", values.size());
        GROVE_CHECK_AS(grove::StaleTensorError, readable(values[index]), "input ", i,
                       " reads kept value ", index,
                       ", which a later replay of the CUDA graph tree overwrote or whose step "
                       "ended; run each backward before the next step's forward");
        tensors.push_back(values[index]);
        continue;
      }
      require(viewed < input_count, "input ", i, " comes from the descriptions, but only ",
              input_count, " were given");
      const size_t index = viewed++;
      tensors.push_back(view_of(inputs[index], Subject{"input", i, name}));
      if (inputs[index].release == nullptr) borrowed.push_back(tensors.back().storage());
    }
    require(viewed == input_count, input_count, " descriptions given but ", viewed,
            " inputs read them");
    values.clear();
    grove::compiler::TensorList results =
        grove::capi::run_viewed(checked, std::move(tensors), borrowed, stream, capacity);
    grove::capi::to_dlpack_all(results, managed);
    *count = results.size();
  });
  if (status != GROVE_OK) release_all(inputs, input_count, viewed);
  return status;
}

grove_status grove_kept_check(const void* token_data, int64_t* first_stale) {
  return run_api("grove_kept_check", [&] {
    require(first_stale != nullptr, "the output pointer `first_stale` is null");
    *first_stale = -1;
    std::vector<Tensor> values = values_of(token_data);
    for (size_t i = 0; i < values.size(); ++i) {
      if (!readable(values[i])) {
        *first_stale = static_cast<int64_t>(i);
        return;
      }
    }
  });
}

grove_status grove_kept_value(const void* token_data, size_t index, void** managed_tensor) {
  return run_api("grove_kept_value", [&] {
    require(managed_tensor != nullptr, "the output pointer `managed_tensor` is null");
    std::vector<Tensor> values = values_of(token_data);
    require(index < values.size(), "kept value ", index, " is out of range; the set holds ",
            values.size());
    *managed_tensor = grove::capi::to_dlpack(values[index]);
  });
}

}  // extern "C"
