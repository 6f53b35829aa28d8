#include "serving/llm/decode_loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/graph_recording.h"
#include "runtime/logging.h"
#include "serving/llm/decode_kernels.h"

namespace grove::serving::llm {

namespace {

namespace layout = decode_layout;
using runtime::Tensor;

int64_t bits_of(double value) {
  int64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

}  // namespace

// The two recordings of one step (Note [Decode loop on the device]) and what
// they hold on to: the outputs of the captured program calls (their blocks
// stay the graphs') and the kv-write tables pointing at them.
struct DecodeLoop::Recorded {
  explicit Recorded(runtime::Device device) : step(device) {}
  runtime::GraphRecording step;
  std::unique_ptr<runtime::WhileGraph> loop;  // null where the device refused the body
  compiler::TensorList step_outputs;
  std::vector<compiler::TensorList> loop_outputs;  // per copy of the step in the body
  Tensor step_table;
  std::vector<Tensor> loop_tables;
};

const char* decode_mode_name(DecodeMode mode) {
  return mode == DecodeMode::kWhileLoop ? "while" : "per_step";
}

DecodeLoop::DecodeLoop(Decoder& decoder, DecodeLoopOptions options)
    : decoder_(decoder), options_(options), device_(decoder.state().device()) {
  const auto& buckets = decoder_.batch_buckets();
  GROVE_CHECK(std::find(buckets.begin(), buckets.end(), options_.bucket) != buckets.end(),
              "DecodeLoop for batch bucket ", options_.bucket,
              ", which the decoder does not have; its buckets go up to ", buckets.back());
  GROVE_CHECK(options_.max_steps > 0, "DecodeLoop needs max_steps > 0; got ", options_.max_steps);
  GROVE_CHECK(options_.steps_per_iteration >= 1 && options_.steps_per_iteration <= 64,
              "DecodeLoop steps_per_iteration must be 1..64; got ", options_.steps_per_iteration);
  GROVE_CHECK(device_.supports_graphs(), "DecodeLoop records graphs; ", device_.str(),
              " has none (use sim or cuda)");
  runtime::DeviceContext& context = runtime::device_context(device_);
  stream_ = context.create_stream();
  pool_ = context.allocator().create_pool();
  const int64_t rows = options_.bucket;
  host_ids_.assign(static_cast<size_t>(rows), 0);
  host_positions_.assign(static_cast<size_t>(rows), -1);
  host_row_state_.assign(static_cast<size_t>(rows * layout::kRowFields), 0);
  ids_ = Tensor::empty({rows}, runtime::DType::kI64, device_);
  positions_ = Tensor::empty({rows}, runtime::DType::kI64, device_);
  row_state_ = Tensor::empty({rows, layout::kRowFields}, runtime::DType::kI64, device_);
  loop_state_ = Tensor::from_vector(std::vector<int64_t>{0, 0}, {layout::kLoopFields}, device_);
  keep_going_ = Tensor::from_vector(std::vector<int32_t>{0}, {1}, device_);
  sample_partials_ = Tensor::from_vector(std::vector<int64_t>(sample_partials_size(rows), 0),
                                         {sample_partials_size(rows)}, device_);
  published_ = runtime::PinnedHostBuffer(
      device_,
      sizeof(int64_t) * static_cast<size_t>(layout::kPublishedWords + options_.max_steps * rows));
  upload_rows();
}

DecodeLoop::~DecodeLoop() {
  try {
    runtime::device_context(device_).platform().synchronize_stream(stream_);
  } catch (...) {
  }
  recorded_.reset();
  model_.reset();
  runtime::device_context(device_).allocator().release_pool(pool_);
}

const int64_t* DecodeLoop::streamed() const {
  return reinterpret_cast<const int64_t*>(published_.data()) + layout::kPublishedWords;
}

void DecodeLoop::upload_rows() {
  ids_.copy_from_host(host_ids_.data());
  positions_.copy_from_host(host_positions_.data());
  row_state_.copy_from_host(host_row_state_.data());
  rows_changed_ = false;
}

void DecodeLoop::check_row(int64_t row) const {
  GROVE_CHECK(row >= 0 && row < options_.bucket, "decode loop row ", row, ": rows are 0..",
              options_.bucket - 1, " (the bucket's slots)");
}

void DecodeLoop::set_row(int64_t row, const DecodeRowStart& start) {
  check_row(row);
  start.sampling.verify();
  const int64_t positions = decoder_.state().cache().max_seq_len;
  GROVE_CHECK(start.position >= 0 && start.position < positions, "decode loop row ", row,
              " at position ", start.position, ": positions are 0..", positions - 1);
  GROVE_CHECK(start.token >= 0 && start.token < decoder_.config().vocab_size, "decode loop row ",
              row, " token ", start.token, " is outside the vocabulary");
  GROVE_CHECK(start.generated >= 0 && start.generated < start.max_new_tokens, "decode loop row ",
              row, " has generated ", start.generated, " of ", start.max_new_tokens,
              " tokens; a row must have tokens left to generate");
  static_assert(kMaxEosTokens == layout::kEosSlots);
  GROVE_CHECK(start.eos_token_ids.size() <= kMaxEosTokens, "decode loop row ", row, " names ",
              start.eos_token_ids.size(), " EOS tokens; a row stops at up to ", kMaxEosTokens);
  host_ids_[static_cast<size_t>(row)] = start.token;
  host_positions_[static_cast<size_t>(row)] = start.position;
  int64_t* state = host_row_state_.data() + row * layout::kRowFields;
  state[layout::kDraws] = start.generated;
  state[layout::kRemaining] = start.max_new_tokens - start.generated;
  for (size_t slot = 0; slot < kMaxEosTokens; ++slot) {
    state[layout::kEos + static_cast<int64_t>(slot)] =
        slot < start.eos_token_ids.size() ? start.eos_token_ids[slot] : -1;
  }
  state[layout::kSeed] = static_cast<int64_t>(start.sampling.seed);
  state[layout::kTopK] = start.sampling.top_k;
  state[layout::kTemperatureBits] =
      bits_of(start.sampling.greedy() ? 0.0 : start.sampling.temperature);
  state[layout::kTopPBits] = bits_of(start.sampling.top_p);
  state[layout::kFinish] = layout::kRunning;
  rows_changed_ = true;
}

void DecodeLoop::clear_row(int64_t row) {
  check_row(row);
  host_positions_[static_cast<size_t>(row)] = -1;
  rows_changed_ = true;
}

bool DecodeLoop::running(int64_t row) const {
  check_row(row);
  return host_positions_[static_cast<size_t>(row)] >= 0;
}

RowFinish DecodeLoop::finish(int64_t row) const {
  check_row(row);
  switch (host_row_state_[static_cast<size_t>(row * layout::kRowFields + layout::kFinish)]) {
    case layout::kFinishedEos:
      return RowFinish::kEos;
    case layout::kFinishedLength:
      return RowFinish::kLength;
    default:
      return RowFinish::kRunning;
  }
}

std::vector<std::string> DecodeLoop::step_kernels() const {
  std::vector<std::string> names;
  if (!recorded_) return names;
  for (const runtime::KernelNodeInfo& node : recorded_->step.kernel_nodes()) {
    names.push_back(node.kernel_name);
  }
  return names;
}

bool DecodeLoop::while_available() const { return recorded_ && recorded_->loop != nullptr; }

size_t DecodeLoop::body_nodes() const {
  return recorded_ && recorded_->loop ? recorded_->loop->body_node_count() : 0;
}

void DecodeLoop::warm_up() {
  if (recorded_) return;
  if (!model_) {
    backend_ = compiler::backends::make_backend("eager");
    compiler::backends::CompileOptions options{.backend = "eager", .device = device_};
    const DecoderState& state = decoder_.state();
    model_ = compiler::backends::compile(
        build_decode_program(decoder_.config(), state.cache(), options_.bucket, device_,
                             decoder_.fused_attention(), decoder_.fused_norms()),
        options, [&state](const compiler::ir::Value& value) { return state.bind(value); },
        backend_);
  }
  record();
}

void DecodeLoop::record() {
  runtime::Platform& platform = runtime::device_context(device_).platform();
  auto recorded = std::make_unique<Recorded>(device_);
  // kv_write_table's layout: every cache, then every new-rows tensor.
  const int64_t table_entries = 4 * decoder_.config().num_layers;
  recorded->step_table = Tensor::empty({table_entries}, runtime::DType::kI64, device_);
  const auto copies = static_cast<size_t>(options_.steps_per_iteration);
  recorded->loop_outputs.resize(copies);
  for (size_t copy = 0; copy < copies; ++copy) {
    recorded->loop_tables.push_back(Tensor::empty({table_entries}, runtime::DType::kI64, device_));
  }
  const int64_t max_seq_len = decoder_.state().cache().max_seq_len;
  auto* published = reinterpret_cast<int64_t*>(published_.data());
  int64_t* streamed_tokens = published + layout::kPublishedWords;
  runtime::StreamGuard guard(device_, stream_);
  // An eager call first: lazy setup (library handles, workspaces) happens
  // outside the captures. Rows stay as they are: the program writes nothing.
  (*model_)({ids_, positions_});
  platform.synchronize_stream(stream_);
  auto one_step = [&](compiler::TensorList& outputs, const Tensor& table) {
    outputs = (*model_)({ids_, positions_});
    decoder_.write_new_rows(table, positions_);
    launch_sample(outputs.at(0), ids_, positions_, row_state_, max_seq_len, streamed_tokens,
                  loop_state_, &sample_partials_);
    launch_loop_control(positions_, loop_state_, keep_going_, published);
  };
  recorded->step.capture_begin(stream_, pool_);
  try {
    one_step(recorded->step_outputs, recorded->step_table);
    recorded->step.capture_end();
  } catch (...) {
    recorded->step.abort_capture();
    throw;
  }
  recorded->step.instantiate();
  // Note [Refused WHILE bodies]: a body the device refuses (CUDA allows only
  // some node types in a conditional body) leaves the loop without a WHILE
  // graph; runs in kWhileLoop mode then replay the per-step graph instead,
  // which gives the same tokens. The reason is kept for while_refusal().
  try {
    auto loop = std::make_unique<runtime::WhileGraph>(device_);
    loop->capture_body_begin(stream_, pool_);
    try {
      // Note [Steps per WHILE iteration].
      for (size_t copy = 0; copy < copies; ++copy) {
        one_step(recorded->loop_outputs[copy], recorded->loop_tables[copy]);
      }
      runtime::launch_set_while_condition(
          device_, loop->condition(), static_cast<const int32_t*>(keep_going_.data_ptr()), stream_);
      loop->capture_body_end();
    } catch (...) {
      loop->abort_capture();
      throw;
    }
    loop->instantiate();
    recorded->loop = std::move(loop);
    while_refusal_.clear();
  } catch (const std::exception& error) {
    platform.synchronize_stream(stream_);
    recorded->loop_outputs.clear();
    while_refusal_ = error.what();
    log(LogLevel::kWarn, str_cat("decode loop (bucket ", options_.bucket, ") on ", device_.str(),
                                 ": the WHILE graph could not be recorded, so its runs replay the "
                                 "per-step graph (same tokens): ",
                                 while_refusal_));
  }
  // The tables point at the new keys and values each recording wrote.
  auto fill_table = [&](const compiler::TensorList& outputs, Tensor& table) {
    Tensor filled =
        kv_write_table(decoder_.state().cache_tensors(), {outputs.begin() + 1, outputs.end()});
    GROVE_CHECK(filled.numel() == table.numel(), "decode loop: a kv-write table of ",
                filled.numel(), " entries for ", table.numel(), " slots");
    std::vector<int64_t> pointers = filled.to_vector<int64_t>();
    table.copy_from_host(pointers.data());
  };
  fill_table(recorded->step_outputs, recorded->step_table);
  if (recorded->loop) {
    for (size_t copy = 0; copy < copies; ++copy) {
      fill_table(recorded->loop_outputs[copy], recorded->loop_tables[copy]);
    }
  }
  recorded_ = std::move(recorded);
}

DecodeRun DecodeLoop::run(
    int64_t steps, DecodeMode mode,
    const std::function<void(int64_t, const std::vector<int64_t>&)>& on_step) {
  GROVE_CHECK(steps > 0 && steps <= options_.max_steps, "decode loop run of ", steps,
              " steps: runs take 1..", options_.max_steps, " (max_steps)");
  warm_up();
  DecodeRun result;
  if (std::none_of(host_positions_.begin(), host_positions_.end(),
                   [](int64_t position) { return position >= 0; })) {
    return result;  // no row runs: no step
  }
  runtime::Platform& platform = runtime::device_context(device_).platform();
  runtime::StreamGuard guard(device_, stream_);
  if (rows_changed_) upload_rows();
  loop_state_.copy_from_host(std::vector<int64_t>{0, steps}.data());
  auto* published = reinterpret_cast<int64_t*>(published_.data());
  std::atomic_ref<int64_t>(published[layout::kPublishedSteps]).store(0);
  std::atomic_ref<int64_t>(published[layout::kPublishedStopped]).store(0);
  const int64_t rows = options_.bucket;
  auto deliver = [&](int64_t upto) {
    for (int64_t step = result.steps; step < upto; ++step) {
      const int64_t* row_tokens = streamed() + step * rows;
      result.tokens.emplace_back(row_tokens, row_tokens + rows);
      if (on_step) on_step(step, result.tokens.back());
    }
    result.steps = upto;
  };
  // Waits until more than `seen` steps are published, or the stream is idle;
  // returns the steps published (Note [Decode loop on the device]).
  auto wait_past = [&](int64_t seen) {
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      int64_t now = std::atomic_ref<int64_t>(published[layout::kPublishedSteps])
                        .load(std::memory_order_acquire);
      if (now > seen) return now;
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) {
        platform.synchronize_stream(stream_);  // rethrows a device failure
        return std::atomic_ref<int64_t>(published[layout::kPublishedSteps])
            .load(std::memory_order_acquire);
      }
      std::this_thread::yield();
    }
  };
  auto stopped = [&] {
    return std::atomic_ref<int64_t>(published[layout::kPublishedStopped])
               .load(std::memory_order_acquire) != 0;
  };
  try {
    result.mode =
        mode == DecodeMode::kWhileLoop && !recorded_->loop ? DecodeMode::kPerStepGraphs : mode;
    if (result.mode == DecodeMode::kWhileLoop) {
      recorded_->loop->launch(stream_);
      while (true) {
        const int64_t now = wait_past(result.steps);
        GROVE_CHECK(now > result.steps, "the decode loop on ", device_.str(),
                    " stopped without publishing a step");
        const bool done = stopped();  // read after the step count it belongs to
        deliver(now);
        if (done && result.steps == std::atomic_ref<int64_t>(published[layout::kPublishedSteps])
                                        .load(std::memory_order_acquire)) {
          break;
        }
      }
    } else {
      for (int64_t step = 0; step < steps; ++step) {
        recorded_->step.replay(stream_);
        const int64_t now = wait_past(step);
        GROVE_CHECK(now == step + 1, "decode step ", step, " on ", device_.str(), " published ",
                    now, " steps");
        deliver(now);
        if (stopped()) break;
      }
    }
  } catch (...) {
    platform.synchronize_stream(stream_);
    throw;
  }
  platform.synchronize_stream(stream_);
  host_ids_ = ids_.to_vector<int64_t>();
  host_positions_ = positions_.to_vector<int64_t>();
  host_row_state_ = row_state_.to_vector<int64_t>();
  return result;
}

}  // namespace grove::serving::llm
