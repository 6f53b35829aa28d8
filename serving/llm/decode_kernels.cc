#include "serving/llm/decode_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "serving/llm/sampler.h"
#include "serving/llm/sampling_math.h"

namespace grove::serving::llm {

namespace {

namespace layout = decode_layout;
using runtime::KernelArgs;
using runtime::LaunchDims;
using runtime::Tensor;

constexpr const char* kPtx =
#include "serving/llm/decode_kernels_ptx.inc"
    ;
// Note [Programmatic dependent launch] (runtime/cuda/cuda_platform.cc).
constexpr const char* kProgrammaticPtx =
#include "serving/llm/decode_kernels_programmatic_ptx.inc"
    ;

template <typename T>
T* pointer(uint64_t slot) {
  return reinterpret_cast<T*>(slot);
}

void host_kv_write(const LaunchDims* dims, const uint64_t* args) {
  const auto* table = pointer<const int64_t>(args[0]);
  const auto tensors = static_cast<int64_t>(args[1]);
  const auto* positions = pointer<const int64_t>(args[2]);
  const auto kv_heads = static_cast<int64_t>(args[3]);
  const auto max_seq_len = static_cast<int64_t>(args[4]);
  const auto row_bytes = static_cast<int64_t>(args[5]);
  for (int64_t row = 0; row < dims->grid.x; ++row) {
    if (positions[row] < 0) continue;
    for (int64_t tensor = 0; tensor < tensors; ++tensor) {
      auto* cache = reinterpret_cast<char*>(table[tensor]);
      const auto* source = reinterpret_cast<const char*>(table[tensors + tensor]);
      for (int64_t head = 0; head < kv_heads; ++head) {
        std::memcpy(cache + ((row * kv_heads + head) * max_seq_len + positions[row]) * row_bytes,
                    source + (row * kv_heads + head) * row_bytes, static_cast<size_t>(row_bytes));
      }
    }
  }
}

void host_kv_write_span(const LaunchDims* dims, const uint64_t* args) {
  const auto* table = pointer<const int64_t>(args[0]);
  const auto tensors = static_cast<int64_t>(args[1]);
  const auto slot = static_cast<int64_t>(args[2]);
  const auto start = static_cast<int64_t>(args[3]);
  const auto count = static_cast<int64_t>(args[4]);
  const auto kv_heads = static_cast<int64_t>(args[5]);
  const auto max_seq_len = static_cast<int64_t>(args[6]);
  const auto row_bytes = static_cast<int64_t>(args[7]);
  for (int64_t tensor = 0; tensor < dims->grid.x; ++tensor) {
    auto* cache = reinterpret_cast<char*>(table[tensor]);
    const auto* source = reinterpret_cast<const char*>(table[tensors + tensor]);
    for (int64_t head = 0; head < kv_heads; ++head) {
      char* slot_head = cache + (slot * kv_heads + head) * max_seq_len * row_bytes;
      for (int64_t position = start; position < max_seq_len; ++position) {
        char* to = slot_head + position * row_bytes;
        const int64_t row = position - start;
        if (row < count) {
          std::memcpy(to, source + (row * kv_heads + head) * row_bytes,
                      static_cast<size_t>(row_bytes));
        } else {
          std::memset(to, 0, static_cast<size_t>(row_bytes));
        }
      }
    }
  }
}

double double_of(int64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// The device kernel's reference: sample_token() (Note [Sampling draws]).
void host_sample(const LaunchDims* dims, const uint64_t* args) {
  const auto* logits = pointer<const float>(args[0]);
  const auto vocab = static_cast<int64_t>(args[1]);
  auto* ids = pointer<int64_t>(args[2]);
  auto* positions = pointer<int64_t>(args[3]);
  auto* row_state = pointer<int64_t>(args[4]);
  const auto max_seq_len = static_cast<int64_t>(args[5]);
  auto* streamed = pointer<int64_t>(args[6]);
  const int64_t* loop_state = pointer<const int64_t>(args[7]);
  const int64_t step = loop_state[layout::kStep];
  if (step >= loop_state[layout::kBudget]) return;  // Note [Steps per WHILE iteration]
  const int64_t rows = dims->grid.y;                // grid.x: the parts of a row, one pass here
  for (int64_t row = 0; row < rows; ++row) {
    int64_t* state = row_state + row * layout::kRowFields;
    if (positions[row] < 0) {
      streamed[step * rows + row] = -1;
      continue;
    }
    SamplingParams params{.temperature = double_of(state[layout::kTemperatureBits]),
                          .top_k = state[layout::kTopK],
                          .top_p = double_of(state[layout::kTopPBits]),
                          .seed = static_cast<uint64_t>(state[layout::kSeed])};
    const int64_t token = sample_token(logits + row * vocab, vocab, params,
                                       static_cast<uint64_t>(state[layout::kDraws]));
    ids[row] = token;
    state[layout::kDraws] += 1;
    const int64_t remaining = --state[layout::kRemaining];
    const int64_t next = positions[row] + 1;
    int64_t finish = layout::kRunning;
    if (layout::is_eos(state, token)) {
      finish = layout::kFinishedEos;
    } else if (remaining <= 0 || next >= max_seq_len) {
      finish = layout::kFinishedLength;
    }
    state[layout::kFinish] = finish;
    positions[row] = finish == layout::kRunning ? next : -1;
    streamed[step * rows + row] = token;
  }
}

void host_loop_control(const LaunchDims*, const uint64_t* args) {
  const auto* positions = pointer<const int64_t>(args[0]);
  const auto rows = static_cast<int64_t>(args[1]);
  auto* loop_state = pointer<int64_t>(args[2]);
  auto* keep_going = pointer<int32_t>(args[3]);
  auto* published = pointer<int64_t>(args[4]);
  // Note [Steps per WHILE iteration]: a stopped launch's later copies of the step do nothing.
  if (loop_state[layout::kStep] >= loop_state[layout::kBudget]) return;
  const int64_t step = ++loop_state[layout::kStep];
  bool running = false;
  for (int64_t row = 0; row < rows; ++row) running = running || positions[row] >= 0;
  const int32_t again = running && step < loop_state[layout::kBudget] ? 1 : 0;
  if (!again) loop_state[layout::kBudget] = step;
  *keep_going = again;
  std::atomic_ref<int64_t>(published[layout::kPublishedStopped])
      .store(again ? 0 : 1, std::memory_order_relaxed);
  std::atomic_ref<int64_t>(published[layout::kPublishedSteps])
      .store(step, std::memory_order_release);
}

runtime::KernelHandle kernel(runtime::Device device, const char* name,
                             runtime::HostKernelFn host_function) {
  runtime::KernelSource source;
  source.name = name;
  if (device.is_cuda()) {
    source.ptx = kPtx;
    source.ptx_programmatic = kProgrammaticPtx;
  } else {
    source.host_function = host_function;
  }
  return runtime::load_kernel_once(device, source);
}

void launch(runtime::Device device, runtime::KernelHandle handle, const LaunchDims& dims,
            const KernelArgs& args) {
  runtime::DeviceContext& context = runtime::device_context(device);
  context.platform().launch_kernel(handle, dims, args, context.current_stream());
}

void check_i64(const Tensor& tensor, const char* what) {
  GROVE_CHECK(tensor.dtype() == runtime::DType::kI64 && tensor.is_contiguous(), what,
              " must be a contiguous i64 tensor; got ", tensor.str());
}

}  // namespace

Tensor kv_write_table(const std::vector<Tensor>& caches, const std::vector<Tensor>& new_rows) {
  GROVE_CHECK(!caches.empty() && caches.size() == new_rows.size(),
              "kv_write_table: ", caches.size(), " caches for ", new_rows.size(),
              " tensors of new rows");
  std::vector<int64_t> table;
  for (const Tensor& cache : caches) table.push_back(reinterpret_cast<int64_t>(cache.data_ptr()));
  for (const Tensor& rows : new_rows) {
    GROVE_CHECK(rows.is_contiguous(), "kv_write_table: new keys or values ", rows.str(),
                " are not contiguous; the decode program must return them materialized");
    table.push_back(reinterpret_cast<int64_t>(rows.data_ptr()));
  }
  return Tensor::from_vector(table, {static_cast<int64_t>(table.size())}, caches[0].device());
}

void launch_kv_write(const Tensor& table, int64_t tensors, const Tensor& positions,
                     int64_t kv_heads, int64_t max_seq_len, int64_t head_dim,
                     runtime::DType dtype) {
  check_i64(table, "the kv-write table");
  check_i64(positions, "decode positions");
  const int64_t row_bytes = head_dim * static_cast<int64_t>(runtime::dtype_size(dtype));
  GROVE_CHECK(row_bytes % 2 == 0, "kv-write rows of ", row_bytes, " bytes: need an even size");
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(positions.numel());
  dims.grid.y = static_cast<uint32_t>(tensors);
  dims.block.x = 128;
  KernelArgs args;
  args.add_pointer(table.data_ptr())
      .add_i64(tensors)
      .add_pointer(positions.data_ptr())
      .add_i64(kv_heads)
      .add_i64(max_seq_len)
      .add_i64(row_bytes);
  launch(table.device(), kernel(table.device(), "grove_llm_kv_write", &host_kv_write), dims, args);
}

void launch_kv_write_span(const Tensor& table, int64_t tensors, int64_t slot, int64_t start,
                          int64_t count, int64_t kv_heads, int64_t max_seq_len, int64_t head_dim,
                          runtime::DType dtype) {
  check_i64(table, "the kv-write table");
  GROVE_CHECK(table.numel() == 2 * tensors, "kv_write_span: a table of ", table.numel(),
              " entries for ", tensors, " caches");
  GROVE_CHECK(slot >= 0 && start >= 0 && count >= 1 && start + count <= max_seq_len,
              "kv_write_span: ", count, " rows at positions ", start, ".. of slot ", slot,
              " do not fit a cache of ", max_seq_len, " positions");
  const int64_t row_bytes = head_dim * static_cast<int64_t>(runtime::dtype_size(dtype));
  GROVE_CHECK(row_bytes % 2 == 0, "kv-write rows of ", row_bytes, " bytes: need an even size");
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(tensors);
  dims.grid.y = static_cast<uint32_t>(kv_heads);
  dims.block.x = 256;
  KernelArgs args;
  args.add_pointer(table.data_ptr())
      .add_i64(tensors)
      .add_i64(slot)
      .add_i64(start)
      .add_i64(count)
      .add_i64(kv_heads)
      .add_i64(max_seq_len)
      .add_i64(row_bytes);
  launch(table.device(), kernel(table.device(), "grove_llm_kv_write_span", &host_kv_write_span),
         dims, args);
}

int64_t sample_partials_size(int64_t rows) { return rows * (2 * kMaxSampleParts + 1); }

void launch_sample(const Tensor& logits, const Tensor& ids, const Tensor& positions,
                   const Tensor& row_state, int64_t max_seq_len, int64_t* streamed,
                   const Tensor& loop_state, const Tensor* partials) {
  GROVE_CHECK(logits.dtype() == runtime::DType::kF32 && logits.is_contiguous() &&
                  logits.shape().size() == 2 && logits.shape()[0] == positions.numel(),
              "sampling needs contiguous f32 logits [rows, vocab] for ", positions.numel(),
              " rows; got ", logits.str());
  check_i64(ids, "decode input ids");
  check_i64(positions, "decode positions");
  check_i64(row_state, "the decode row state");
  check_i64(loop_state, "the decode loop state");
  // Note [Greedy token over several blocks]: kDefaultSampleParts for one row (or
  // GROVE_SAMPLE_PARTS for any) blocks a row where partials are given.
  int64_t parts = 1;
  if (partials != nullptr) {
    check_i64(*partials, "the sampling partials");
    GROVE_CHECK(partials->numel() >= sample_partials_size(positions.numel()),
                "sampling partials of ", partials->numel(), " entries for ", positions.numel(),
                " rows; need ", sample_partials_size(positions.numel()));
    const char* setting = std::getenv("GROVE_SAMPLE_PARTS");
    if (setting != nullptr) {
      parts = std::clamp<int64_t>(std::atoll(setting), 1, kMaxSampleParts);
    } else if (positions.numel() == 1) {
      parts = kDefaultSampleParts;  // measured at batch 1 only
    }
  }
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(parts);
  dims.grid.y = static_cast<uint32_t>(positions.numel());
  dims.block.x = sampling::kThreads;
  KernelArgs args;
  args.add_pointer(logits.data_ptr())
      .add_i64(logits.shape()[1])
      .add_pointer(ids.data_ptr())
      .add_pointer(positions.data_ptr())
      .add_pointer(row_state.data_ptr())
      .add_i64(max_seq_len)
      .add_pointer(streamed)
      .add_pointer(loop_state.data_ptr())
      .add_pointer(partials != nullptr ? partials->data_ptr() : nullptr);
  launch(logits.device(), kernel(logits.device(), "grove_llm_sample", &host_sample), dims, args);
}

void launch_loop_control(const Tensor& positions, const Tensor& loop_state,
                         const Tensor& keep_going, int64_t* published) {
  check_i64(positions, "decode positions");
  check_i64(loop_state, "the decode loop state");
  GROVE_CHECK(keep_going.dtype() == runtime::DType::kI32, "the loop flag must be i32; got ",
              keep_going.str());
  LaunchDims dims;
  KernelArgs args;
  args.add_pointer(positions.data_ptr())
      .add_i64(positions.numel())
      .add_pointer(loop_state.data_ptr())
      .add_pointer(keep_going.data_ptr())
      .add_pointer(published);
  launch(positions.device(),
         kernel(positions.device(), "grove_llm_loop_control", &host_loop_control), dims, args);
}

}  // namespace grove::serving::llm
