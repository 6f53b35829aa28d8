#include "tests/fuzz/differential.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "compiler/backends/backend_stats_json.h"
#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "compiler/model_format/model_json.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/error.h"
#include "runtime/philox_generator.h"
#include "tests/fuzz/program_generator.h"
#include "training/losses.h"
#include "training/trainer.h"

namespace grove::fuzz {

namespace {

using compiler::TensorList;
using compiler::backends::CompiledModel;
using compiler::ir::Program;
using compiler::ir::ValueId;
using compiler::ir::ValueKind;
using runtime::DType;
using runtime::Tensor;

// Host bytes of one call's worth of input values (not all zero).
std::vector<uint8_t> random_bytes(const compiler::ir::TensorType& type, std::mt19937_64& rng) {
  size_t count = static_cast<size_t>(runtime::shape_numel(type.shape));
  if (type.dtype == DType::kI64) {
    std::vector<int64_t> ids(count);
    for (int64_t& id : ids) id = std::uniform_int_distribution<int64_t>(0, kTokenRange - 1)(rng);
    std::vector<uint8_t> bytes(count * sizeof(int64_t));
    if (count > 0) std::memcpy(bytes.data(), ids.data(), bytes.size());
    return bytes;
  }
  GROVE_CHECK(type.dtype == DType::kF32, "fuzz: inputs of dtype ", runtime::dtype_name(type.dtype),
              " are not generated");
  std::vector<float> values(count);
  for (float& v : values) {
    v = std::uniform_real_distribution<float>(-3, 3)(rng);
    if (v == 0) v = 0.5f;
  }
  std::vector<uint8_t> bytes(count * sizeof(float));
  if (count > 0) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// First difference between two tensors' shapes, dtypes or bits; "" when equal.
std::string bitwise_difference(const Tensor& expected, const Tensor& got) {
  if (expected.shape() != got.shape() || expected.dtype() != got.dtype()) {
    return "eager " + expected.str() + " but cudagraphs " + got.str();
  }
  std::vector<uint8_t> a = expected.to_host_bytes();
  std::vector<uint8_t> b = got.to_host_bytes();
  if (a == b) return "";
  std::vector<double> av = expected.to_doubles();
  std::vector<double> bv = got.to_doubles();
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::memcmp(&av[i], &bv[i], sizeof(double)) != 0) {
      std::ostringstream out;
      out << "element " << i << ": eager " << av[i] << " but cudagraphs " << bv[i];
      return out.str();
    }
  }
  return "bits differ";
}

// A stale (poisoned) or overwritten tensor: reading it throws StaleTensorError.
bool invalidated(const Tensor& tensor) {
  return tensor.storage()->is_poisoned() || tensor.storage()->is_overwritten();
}

class CallSequence {
 public:
  CallSequence(const Program& program, uint64_t seed)
      : program_(program),
        rng_(seed),
        eager_(compiler::backends::compile(program, {.backend = "eager"})),
        graphs_(compiler::backends::compile(program, {.backend = "cudagraphs"})),
        input_ids_(program.inputs_of_kind(ValueKind::kInput)) {}

  // "" when the call matched.
  std::string call(int index, DifferentialOutcome& outcome) {
    bool new_step = chance(0.25);
    if (new_step) cudagraph_trees::mark_step_begin();
    std::string trace = "call " + std::to_string(index) + (new_step ? " (new step)" : "") + ":";
    TensorList eager_inputs, graphs_inputs;
    int mode = std::uniform_int_distribution<int>(0, 3)(rng_);
    if (mode == 1 && owned_eager_.empty()) mode = 0;
    bool fed_back = false;
    std::set<size_t>
        fed_inputs;  // previous outputs: a replay may overwrite them (docs/ARCHITECTURE.md, 4.6)
    std::vector<std::vector<uint8_t>> values;
    for (size_t i = 0; i < input_ids_.size(); ++i) {
      const auto& type = program_.value(input_ids_[i]).type;
      values.push_back(random_bytes(type, rng_));
    }
    if (mode == 3) {
      // Strided views (Note [Strided inputs], compiler/lowering/lower.h).
      eager_inputs = strided(values);
      for (const Tensor& input : eager_inputs) graphs_inputs.push_back(same_layout_copy(input));
    } else if (mode == 1) {
      for (size_t i = 0; i < input_ids_.size(); ++i) {
        owned_eager_[i].copy_from_host(values[i].data());
        owned_graphs_[i].copy_from_host(values[i].data());
      }
      eager_inputs = owned_eager_;
      graphs_inputs = owned_graphs_;
    } else {
      owned_eager_ = fresh(values);
      owned_graphs_ = fresh(values);
      eager_inputs = owned_eager_;
      graphs_inputs = owned_graphs_;
      if (mode == 2) {
        // Feed back outputs of the previous call whose type fits an input;
        // now and then one output into two inputs (Note [Aliased inputs]),
        // and into a read-only input now and then as a strided view of the
        // output: its transpose, or its first row broadcast (a PyTorch step
        // between two of grove's graphs hands such views on: Note [Private
        // copies keep each element], prepared_program.cc).
        const std::vector<size_t>& written = eager_.lowered().function().mutated_input_indices;
        std::vector<bool> used(last_eager_.size(), false);
        for (size_t i = 0; i < input_ids_.size(); ++i) {
          const auto& type = program_.value(input_ids_[i]).type;
          size_t position = static_cast<size_t>(program_.input_position(input_ids_[i]));
          const bool read_only =
              std::find(written.begin(), written.end(), position) == written.end();
          for (size_t o = 0; o < last_eager_.size(); ++o) {
            if (used[o] && !chance(0.3)) continue;
            const Tensor& output = last_eager_[o];
            if (output.dtype() != type.dtype || !output.is_contiguous() ||
                !last_graphs_[o].is_contiguous()) {
              continue;
            }
            std::function<Tensor(const Tensor&)> view;
            std::string how;
            if (output.shape() == type.shape && chance(0.7)) {
              view = [](const Tensor& t) { return t; };
              if (read_only && type.shape.size() == 2 && type.shape[0] > 1 && chance(0.25)) {
                view = [](const Tensor& t) { return t.slice(0, 0, 1).expand(t.shape()); };
                how = " (first row broadcast)";
              }
            } else if (read_only && type.shape.size() == 2 && output.dim() == 2 &&
                       output.shape()[0] == type.shape[1] && output.shape()[1] == type.shape[0] &&
                       chance(0.5)) {
              view = [](const Tensor& t) { return t.transpose(0, 1); };
              how = " (transposed)";
            }
            if (!view) continue;
            eager_inputs[i] = view(last_eager_[o]);
            graphs_inputs[i] = view(last_graphs_[o]);
            trace += " input " + std::to_string(i) + " <- output " + std::to_string(o) + how + ";";
            fed_back = true;
            used[o] = true;
            fed_inputs.insert(i);
            break;
          }
        }
      }
    }
    // The values the graphs side is called with, for a retry after a stale input.
    std::vector<std::vector<uint8_t>> graphs_values;
    if (fed_back) {
      for (size_t i = 0; i < graphs_inputs.size(); ++i) {
        const Tensor& t = graphs_inputs[i];
        graphs_values.push_back(invalidated(t) ? eager_inputs[i].to_host_bytes()
                                               : t.to_host_bytes());
      }
    }
    if (trace_) {
      std::cerr << trace << " inputs " << mode_name(mode) << "\n";
    }
    // Both sides draw the same implicit random numbers (Note [Implicit generator]).
    const uint64_t generator_seed = rng_();
    runtime::PhiloxGenerator& generator = runtime::default_generator(program_.device());
    generator.manual_seed(generator_seed);
    TensorList eager_outputs = eager_(eager_inputs);
    TensorList graphs_outputs;
    try {
      generator.manual_seed(generator_seed);
      graphs_outputs = graphs_(graphs_inputs);
    } catch (const StaleTensorError&) {
      if (!fed_back) throw;
      ++outcome.stale_retries;
      if (trace_) std::cerr << "  a fed-back input was stale: retried with copies\n";
      // As a user following the error message would: only the stale inputs
      // are replaced, by fresh tensors holding the values the call was given
      // (the eager side saw them before it ran; mutation may have changed
      // eager_inputs since). The other inputs stay as they are, aliasing
      // included (a fed-back view of a buffer must stay one: fuzz seed 111).
      // The failed call must have changed nothing (Note [Stale inputs throw
      // first], cudagraph_trees/tree_manager.h).
      // One stale tensor fed into two inputs gets one replacement: the
      // eager side still passes them aliased (the same view: a broadcast of
      // its first row is another input).
      std::vector<std::pair<Tensor, Tensor>> replaced;  // stale input, its replacement
      for (size_t i = 0; i < graphs_inputs.size(); ++i) {
        if (!invalidated(graphs_inputs[i])) continue;
        Tensor replacement;
        for (const auto& [stale, fresh_tensor] : replaced) {
          if (stale.storage() == graphs_inputs[i].storage() &&
              stale.offset() == graphs_inputs[i].offset() &&
              stale.shape() == graphs_inputs[i].shape() &&
              stale.strides() == graphs_inputs[i].strides()) {
            replacement = fresh_tensor;
          }
        }
        if (!replacement.defined()) {
          const auto& type = program_.value(input_ids_[i]).type;
          replacement =
              Tensor::from_host(graphs_values[i].data(), type.shape, type.dtype, program_.device());
          replaced.emplace_back(graphs_inputs[i], replacement);
        }
        graphs_inputs[i] = replacement;
      }
      generator.manual_seed(generator_seed);
      graphs_outputs = graphs_(graphs_inputs);
    }
    ++outcome.calls;
    if (trace_) {
      const cudagraph_trees::TreeCounters& counters =
          cudagraph_trees::tree_manager_for(program_.device()).counters();
      std::cerr << "  tree so far: " << counters.warmups << " warm-ups, " << counters.recordings
                << " recordings, " << counters.replays << " replays, " << counters.eager_calls
                << " eager calls, " << counters.input_copies << " input copies, "
                << counters.input_copy_backs << " copy-backs; backend: "
                << grove::compiler::backends::stats_json(graphs_.backend_stats()).dump() << "\n"
                << cudagraph_trees::tree_manager_for(program_.device()).dot() << "\n";
    }
    std::string where = "call " + std::to_string(index) + " (inputs " + mode_name(mode) + ")";
    if (eager_outputs.size() != graphs_outputs.size()) return where + ": output counts differ";
    for (size_t o = 0; o < eager_outputs.size(); ++o) {
      std::string difference = bitwise_difference(eager_outputs[o], graphs_outputs[o]);
      if (!difference.empty()) return where + ", output " + std::to_string(o) + ": " + difference;
    }
    for (size_t i = 0; i < eager_inputs.size(); ++i) {
      if (fed_inputs.count(i) > 0 || invalidated(eager_inputs[i]) ||
          invalidated(graphs_inputs[i])) {
        continue;
      }
      std::string difference = bitwise_difference(eager_inputs[i], graphs_inputs[i]);
      if (!difference.empty()) {
        return where + ", input " + program_.value(input_ids_[i]).name +
               " after the call: " + difference;
      }
    }
    for (const std::string& name : eager_.state_names()) {
      std::string difference = bitwise_difference(eager_.state(name), graphs_.state(name));
      if (!difference.empty()) return where + ", state " + name + ": " + difference;
    }
    cudagraph_trees::tree_manager_for(program_.device()).verify();
    if (!kept_.empty() && chance(0.5)) {
      std::string kept_failure = check_kept_outputs(kept_.front());
      if (!kept_failure.empty()) return where + ", " + kept_failure;
    }
    last_eager_ = eager_outputs;
    last_graphs_ = graphs_outputs;
    if (chance(0.4)) kept_.push_back({eager_outputs, graphs_outputs});
    while (!kept_.empty() && (kept_.size() > 3 || chance(0.3))) kept_.pop_front();
    return "";
  }

 private:
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  // Note [Fuzz call sequences]: outputs kept from an earlier call read, on
  // the graphs side, either what eager's copies read or, once a later replay
  // overwrote them or their generation ended, throw StaleTensorError; never
  // other values.
  static std::string check_kept_outputs(const std::pair<TensorList, TensorList>& kept) {
    for (size_t o = 0; o < kept.first.size(); ++o) {
      const Tensor& graphs_output = kept.second[o];
      if (invalidated(graphs_output)) {
        try {
          graphs_output.to_host_bytes();
          return "kept output " + std::to_string(o) +
                 " was invalidated but reading it did not throw";
        } catch (const StaleTensorError&) {
          continue;
        }
      }
      std::string difference = bitwise_difference(kept.first[o], graphs_output);
      if (!difference.empty()) return "kept output " + std::to_string(o) + ": " + difference;
    }
    return "";
  }
  static const char* mode_name(int mode) {
    static const char* const kNames[] = {"new", "overwritten in place", "fed back",
                                         "strided views"};
    return kNames[mode];
  }
  // New inputs holding `values` where a read-only f32 input of rank >= 2 is
  // now and then a transposed view and one with more than one row an
  // expanded single row (whose values then replace `values`).
  TensorList strided(std::vector<std::vector<uint8_t>>& values) {
    TensorList tensors = fresh(values);
    const std::vector<size_t>& written = eager_.lowered().function().mutated_input_indices;
    for (size_t i = 0; i < input_ids_.size(); ++i) {
      const auto& type = program_.value(input_ids_[i]).type;
      size_t position = static_cast<size_t>(program_.input_position(input_ids_[i]));
      if (type.dtype != DType::kF32 || type.shape.empty() ||
          std::find(written.begin(), written.end(), position) != written.end()) {
        continue;
      }
      const auto* floats = reinterpret_cast<float*>(values[i].data());
      const int64_t rows = type.shape[0];
      const int64_t row_size = runtime::shape_numel(type.shape) / std::max<int64_t>(rows, 1);
      if (type.shape.size() >= 2 && chance(0.5)) {
        runtime::Shape swapped = type.shape;
        std::swap(swapped[0], swapped[1]);
        const int64_t inner = row_size / type.shape[1];  // elements per [i, j] pair
        std::vector<float> base(values[i].size() / sizeof(float));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < type.shape[1]; ++c) {
            for (int64_t k = 0; k < inner; ++k) {
              base[static_cast<size_t>((c * rows + r) * inner + k)] =
                  floats[static_cast<size_t>((r * type.shape[1] + c) * inner + k)];
            }
          }
        }
        tensors[i] = Tensor::from_vector(base, swapped, program_.device()).transpose(0, 1);
      } else if (rows > 1 && chance(0.5)) {
        std::vector<float> row(floats, floats + row_size);
        for (int64_t r = 1; r < rows; ++r) {
          std::memcpy(values[i].data() + static_cast<size_t>(r * row_size) * sizeof(float),
                      row.data(), static_cast<size_t>(row_size) * sizeof(float));
        }
        runtime::Shape one_row = type.shape;
        one_row[0] = 1;
        tensors[i] = Tensor::from_vector(row, one_row, program_.device()).expand(type.shape);
      }
    }
    return tensors;
  }
  // A tensor with `tensor`'s shape, strides and offset over a copy of its storage.
  static Tensor same_layout_copy(const Tensor& tensor) {
    const int64_t elements =
        static_cast<int64_t>(tensor.storage()->nbytes() / runtime::dtype_size(tensor.dtype()));
    Tensor whole(tensor.storage(), {elements}, {1}, 0, tensor.dtype());
    Tensor copy = Tensor::from_host(whole.to_host_bytes().data(), {elements}, tensor.dtype(),
                                    tensor.device());
    return Tensor(copy.storage(), tensor.shape(), tensor.strides(), tensor.offset(),
                  tensor.dtype());
  }
  TensorList fresh(const std::vector<std::vector<uint8_t>>& values) {
    TensorList tensors;
    for (size_t i = 0; i < input_ids_.size(); ++i) {
      const auto& type = program_.value(input_ids_[i]).type;
      tensors.push_back(
          Tensor::from_host(values[i].data(), type.shape, type.dtype, program_.device()));
    }
    return tensors;
  }

  const Program& program_;
  // GROVE_FUZZ_TRACE=1: each call's binding on stderr (for reading a failure).
  const bool trace_ = std::getenv("GROVE_FUZZ_TRACE") != nullptr;
  std::mt19937_64 rng_;
  CompiledModel eager_;
  CompiledModel graphs_;
  std::vector<ValueId> input_ids_;
  TensorList owned_eager_, owned_graphs_;
  TensorList last_eager_, last_graphs_;
  std::deque<std::pair<TensorList, TensorList>> kept_;
};

}  // namespace

DifferentialOutcome run_differential(const Program& program, uint64_t scenario_seed, int calls) {
  cudagraph_trees::backend::register_cudagraphs_backend();
  cudagraph_trees::reset_tree_managers();
  DifferentialOutcome outcome;
  try {
    CallSequence sequence(program, scenario_seed);
    for (int call = 0; call < calls; ++call) {
      std::string failure = sequence.call(call, outcome);
      if (!failure.empty()) {
        outcome.passed = false;
        outcome.failure = failure;
        break;
      }
    }
    outcome.replays =
        static_cast<int>(cudagraph_trees::tree_manager_for(program.device()).counters().replays);
  } catch (const std::exception& error) {
    outcome.passed = false;
    outcome.failure = "call " + std::to_string(outcome.calls) + " threw: " + error.what();
  }
  cudagraph_trees::reset_tree_managers();
  return outcome;
}

ReducedFailure reduce_failure(const Program& program, uint64_t scenario_seed, int calls,
                              int max_attempts) {
  ReducedFailure best{program, run_differential(program, scenario_seed, calls).failure, "", 1};
  bool progress = true;
  auto try_candidate = [&](const std::set<size_t>& dropped,
                           const std::map<int32_t, size_t>& bypassed) {
    if (best.attempts >= max_attempts) return false;
    std::optional<Program> candidate;
    try {
      candidate = rewrite_program(best.program, dropped, bypassed);
    } catch (const Error&) {
      return false;
    }
    ++best.attempts;
    DifferentialOutcome outcome = run_differential(*candidate, scenario_seed, calls);
    if (outcome.passed) return false;
    best.program = std::move(*candidate);
    best.failure = outcome.failure;
    return true;
  };
  while (progress && best.attempts < max_attempts) {
    progress = false;
    for (size_t o = 0; best.program.outputs().size() > 1 && o < best.program.outputs().size();
         ++o) {
      if (try_candidate({o}, {})) {
        progress = true;
        break;
      }
    }
    if (progress) continue;
    for (size_t n = best.program.nodes().size(); n-- > 0 && !progress;) {
      const auto& node = best.program.nodes()[n];
      if (node.results.size() != 1) continue;
      for (size_t k = 0; k < node.operands.size() && !progress; ++k) {
        ValueId operand = node.operands[k];
        if (operand == compiler::ir::kNoValue ||
            !(best.program.value(operand).type == best.program.value(node.results[0]).type)) {
          continue;
        }
        progress = try_candidate({}, {{static_cast<int32_t>(n), k}});
      }
    }
  }
  best.json = compiler::model_format::export_model(best.program);
  return best;
}

DifferentialOutcome run_training_differential(uint64_t seed, runtime::Device device, int steps) {
  cudagraph_trees::backend::register_cudagraphs_backend();
  cudagraph_trees::reset_tree_managers();
  DifferentialOutcome outcome;
  std::mt19937_64 rng(seed);
  auto pick = [&](int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng); };
  try {
    compiler::ir::ProgramBuilder b("train_fuzz_" + std::to_string(seed), device);
    int64_t batch = pick(1, 4);
    int64_t width = pick(2, 6);
    const int64_t input_width = width;
    ValueId h = b.input("x", {batch, width});
    int layers = pick(1, 3);
    for (int layer = 0; layer < layers; ++layer) {
      int64_t next = pick(2, 6);
      std::string name = "fc" + std::to_string(layer);
      ValueId w = b.param(name + ".weight", {next, width}, DType::kF32,
                          compiler::ir::normal_init(0.5, static_cast<uint64_t>(pick(1, 99))));
      ValueId bias =
          pick(0, 1) ? b.param(name + ".bias", {next}, DType::kF32,
                               compiler::ir::normal_init(0.1, static_cast<uint64_t>(pick(1, 99))))
                     : compiler::ir::kNoValue;
      h = b.linear(h, w, bias, name);
      switch (pick(0, 4)) {
        case 0:
          h = b.relu(h);
          break;
        case 1:
          h = b.gelu(h);
          break;
        case 2:
          h = b.tanh(h);
          break;
        case 3:
          h = b.sigmoid(h);
          break;
        default:
          h = b.layer_norm(
              h, b.param(name + ".ln_w", {next}, DType::kF32, compiler::ir::ones_init()),
              b.param(name + ".ln_b", {next}, DType::kF32, compiler::ir::zeros_init()));
      }
      width = next;
    }
    b.output(h);
    Program model = b.build();
    ValueId loss = training::add_mse_loss(model, model.outputs()[0]);
    training::OptimizerKind kind =
        pick(0, 1) ? training::OptimizerKind::kAdamW : training::OptimizerKind::kSgdMomentum;
    training::Trainer eager(model, loss, {.backend = "eager", .optimizer = kind});
    training::Trainer graphs(model, loss, {.backend = "cudagraphs", .optimizer = kind});
    training::Hyperparameters hyper;
    hyper.lr = 0.01;
    hyper.weight_decay = pick(0, 1) ? 0.01 : 0.0;
    // One batch of the model's input and target, drawn from the case's rng.
    auto random_batch = [&] {
      TensorList batch_tensors;
      for (const runtime::Shape& shape :
           {runtime::Shape{batch, input_width}, runtime::Shape{batch, width}}) {
        std::vector<uint8_t> bytes = random_bytes({shape, DType::kF32, device}, rng);
        batch_tensors.push_back(Tensor::from_host(bytes.data(), shape, DType::kF32, device));
      }
      return batch_tensors;
    };
    for (int step = 0; step < steps && outcome.passed; ++step) {
      TensorList inputs = random_batch();
      // Most steps are whole steps; some are micro-batches: two forwards, then
      // their two backwards in either order (the last one's gradients stay)
      // (Note [Several backwards per step] in cudagraph_trees/generations.h).
      std::string difference;
      if (pick(0, 3) != 0) {
        Tensor expected = eager.step(inputs, hyper);
        Tensor got = graphs.step(inputs, hyper);
        difference = bitwise_difference(expected, got);
      } else {
        TensorList second = random_batch();
        const bool reversed = pick(0, 1) == 1;
        auto accumulate = [&](training::Trainer& trainer, Tensor* first_loss) {
          training::Trainer::PendingBackward first = trainer.forward(inputs);
          training::Trainer::PendingBackward then = trainer.forward(second);
          trainer.backward(reversed ? then : first);
          trainer.backward(reversed ? first : then);
          *first_loss = first.loss;
        };
        Tensor expected, got;
        accumulate(eager, &expected);
        accumulate(graphs, &got);
        difference = bitwise_difference(expected, got);
        if (!difference.empty()) difference = "micro-batch loss: " + difference;
      }
      ++outcome.calls;
      for (const std::string& name : eager.state_names()) {
        if (!difference.empty()) break;
        difference = bitwise_difference(eager.state(name), graphs.state(name));
        if (!difference.empty()) difference = "state " + name + ": " + difference;
      }
      if (!difference.empty()) {
        outcome.passed = false;
        outcome.failure = "step " + std::to_string(step) + ": " + difference;
      }
      cudagraph_trees::tree_manager_for(device).verify();
    }
    outcome.replays =
        static_cast<int>(cudagraph_trees::tree_manager_for(device).counters().replays);
  } catch (const std::exception& error) {
    outcome.passed = false;
    outcome.failure = "step " + std::to_string(outcome.calls) + " threw: " + error.what();
  }
  cudagraph_trees::reset_tree_managers();
  return outcome;
}

}  // namespace grove::fuzz
