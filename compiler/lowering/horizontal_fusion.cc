#include "compiler/lowering/horizontal_fusion.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include "runtime/error.h"

namespace grove::compiler::lowering {
namespace {

using codegen::KernelSpec;

constexpr size_t kMaxParameterBytes = 4000;

// How a part addresses one buffer: by its linear index ('c'), always element 0
// ('z'), or either, because the kernel has a single element ('*').
using BufferRoles = std::string;

bool is_contiguous_over(const Shape& strides, const Shape& shape) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

bool is_broadcast_over(const Shape& strides, const Shape& shape) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && strides[d] != 0) return false;
  }
  return true;
}

// The roles of `spec`'s inputs then outputs, or nullopt when it cannot be a part.
std::optional<BufferRoles> part_roles(const KernelSpec& spec) {
  if (!spec.reductions.empty() || !spec.part_sizes.empty() || spec.element_count() == 0) {
    return std::nullopt;
  }
  for (const codegen::Expr& expr : spec.exprs) {
    if (expr.op == codegen::ExprOp::kIndex || expr.op == codegen::ExprOp::kLoadAt ||
        expr.op == codegen::ExprOp::kPhilox) {
      return std::nullopt;
    }
  }
  const bool single = spec.element_count() == 1;
  BufferRoles roles;
  auto role = [&](const Shape& strides) -> std::optional<char> {
    if (single) return '*';
    if (is_contiguous_over(strides, spec.iteration_shape)) return 'c';
    if (is_broadcast_over(strides, spec.iteration_shape)) return 'z';
    return std::nullopt;
  };
  for (const codegen::BufferSpec& input : spec.inputs) {
    std::optional<char> r = role(input.strides);
    if (!r) return std::nullopt;
    roles.push_back(*r);
  }
  for (const codegen::OutputSpec& output : spec.outputs) {
    if (output.per_row) return std::nullopt;
    std::optional<char> r = role(output.strides);
    if (!r) return std::nullopt;
    roles.push_back(*r);
  }
  return roles;
}

// The spec's signature without shapes and strides: equal keys compute the same
// expressions on buffers of the same dtypes.
std::string structure_key(const KernelSpec& spec) {
  KernelSpec shapeless = spec;
  shapeless.iteration_shape = {};
  for (codegen::BufferSpec& input : shapeless.inputs) input.strides = {};
  for (codegen::OutputSpec& output : shapeless.outputs) output.strides = {};
  return shapeless.signature();
}

// Combines two role strings, or nullopt when some buffer is 'c' in one and 'z' in the other.
std::optional<BufferRoles> combine(const BufferRoles& a, const BufferRoles& b) {
  BufferRoles result = a;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == '*') {
      result[i] = b[i];
    } else if (b[i] != '*' && b[i] != a[i]) {
      return std::nullopt;
    }
  }
  return result;
}

class Run {
 public:
  explicit Run(const ScheduledProgram& program) : program_(program) {}

  bool empty() const { return members_.empty(); }
  const std::vector<size_t>& members() const { return members_; }

  // Adds kernel step `index` when it can join; returns whether it did.
  bool try_add(size_t index) {
    const KernelLaunch& launch = program_.steps[index].kernel;
    std::optional<BufferRoles> roles = part_roles(launch.spec);
    if (!roles) return false;
    // The merged kernel runs where the first member ran: a later member may
    // not touch a slot that a view or alias in between defines.
    for (const std::vector<int>* slots : {&launch.input_slots, &launch.output_slots}) {
      for (int slot : *slots) {
        if (defined_between_.count(slot)) return false;
      }
    }
    std::set<int> reads = roots(launch.input_slots);
    std::set<int> writes = roots(launch.output_slots);
    if (members_.empty()) {
      start(index, *roles, std::move(reads), std::move(writes));
      return true;
    }
    if (structure_key(launch.spec) != key_) return false;
    std::optional<BufferRoles> combined = combine(roles_, *roles);
    if (!combined) return false;
    std::vector<bool> shared = shared_;
    std::vector<int> in_place = in_place_;
    const KernelLaunch& first = program_.steps[members_.front()].kernel;
    for (size_t i = 0; i < shared.size(); ++i) {
      shared[i] = shared[i] && launch.input_slots[i] == first.input_slots[i];
    }
    for (size_t o = 0; o < in_place.size(); ++o) {
      if (in_place[o] < 0) {
        continue;
      }
      const auto input = static_cast<size_t>(in_place[o]);
      if (shared[input] || !writes_through(launch, o, input, *combined)) {
        in_place[o] = -1;
      }
    }
    const size_t parts = members_.size() + 1;
    if (parameter_bytes(shared, in_place, parts) > kMaxParameterBytes) {
      return false;
    }
    for (int root : writes) {
      if (reads_.count(root) || writes_.count(root)) return false;
    }
    for (int root : reads) {
      if (writes_.count(root)) return false;
    }
    roles_ = *combined;
    shared_ = std::move(shared);
    in_place_ = std::move(in_place);
    reads_.insert(reads.begin(), reads.end());
    writes_.insert(writes.begin(), writes.end());
    members_.push_back(index);
    return true;
  }

  void clear() {
    members_.clear();
    defined_between_.clear();
  }

  // A view or alias step after the first member.
  void skip(const Step& step) {
    if (members_.empty()) return;
    if (step.result >= 0) defined_between_.insert(step.result);
    defined_between_.insert(step.allocate.begin(), step.allocate.end());
  }

  // The merged step; `members()` has at least two steps.
  Step merged() const {
    const Step& first = program_.steps[members_.front()];
    Step step;
    step.kind = StepKind::kKernel;
    step.node_name = first.node_name;
    KernelSpec& spec = step.kernel.spec;
    spec = first.kernel.spec;
    spec.name = "multi_" + first.kernel.spec.name;
    int64_t largest = 0;
    for (size_t index : members_) {
      const Step& member = program_.steps[index];
      const KernelLaunch& launch = member.kernel;
      spec.part_sizes.push_back(launch.spec.element_count());
      largest = std::max(largest, launch.spec.element_count());
      step.kernel.input_slots.insert(step.kernel.input_slots.end(), launch.input_slots.begin(),
                                     launch.input_slots.end());
      step.allocate.insert(step.allocate.end(), member.allocate.begin(), member.allocate.end());
    }
    for (size_t index : members_) {
      const KernelLaunch& launch = program_.steps[index].kernel;
      step.kernel.output_slots.insert(step.kernel.output_slots.end(), launch.output_slots.begin(),
                                      launch.output_slots.end());
      step.kernel.output_offsets.insert(step.kernel.output_offsets.end(),
                                        launch.output_offsets.begin(), launch.output_offsets.end());
    }
    spec.iteration_shape = {largest};
    const size_t inputs = spec.inputs.size();
    for (size_t i = 0; i < inputs; ++i) {
      spec.inputs[i].strides = {roles_[i] == 'z' ? 0 : 1};
      spec.inputs[i].shared_by_parts = shared_[i];
    }
    for (size_t o = 0; o < spec.outputs.size(); ++o) {
      spec.outputs[o].strides = {roles_[inputs + o] == 'z' ? 0 : 1};
      spec.outputs[o].in_place_input = in_place_[o];
    }
    step.op = spec.name;
    return step;
  }

 private:
  void start(size_t index, BufferRoles roles, std::set<int> reads, std::set<int> writes) {
    const KernelLaunch& launch = program_.steps[index].kernel;
    members_ = {index};
    defined_between_.clear();
    key_ = structure_key(launch.spec);
    roles_ = std::move(roles);
    reads_ = std::move(reads);
    writes_ = std::move(writes);
    shared_.assign(launch.input_slots.size(), true);
    in_place_.assign(launch.output_slots.size(), -1);
    for (size_t o = 0; o < in_place_.size(); ++o) {
      for (size_t i = 0; i < launch.input_slots.size() && in_place_[o] < 0; ++i) {
        if (writes_through(launch, o, i, roles_)) {
          in_place_[o] = static_cast<int>(i);
        }
      }
    }
  }

  // Whether output `o` of `launch` is written at input `i`'s pointer, with its strides.
  static bool writes_through(const KernelLaunch& launch, size_t o, size_t i,
                             const BufferRoles& roles) {
    return launch.output_slots[o] == launch.input_slots[i] && launch.output_offsets[o] == 0 &&
           roles[launch.input_slots.size() + o] == roles[i];
  }

  // Note [Multi-part kernel arguments] (compiler/codegen/kernel_spec.h).
  size_t parameter_bytes(const std::vector<bool>& shared, const std::vector<int>& in_place,
                         size_t parts) const {
    const KernelSpec& spec = program_.steps[members_.front()].kernel.spec;
    size_t pointers = 0;
    for (bool one : shared) {
      pointers += one ? 1 : parts;
    }
    for (int input : in_place) {
      pointers += input >= 0 ? 0 : parts;
    }
    return 8 * (pointers + static_cast<size_t>(spec.scalar_count));
  }

  std::set<int> roots(const std::vector<int>& slots) const {
    std::set<int> result;
    for (int slot : slots) result.insert(program_.slots[static_cast<size_t>(slot)].root);
    return result;
  }

  const ScheduledProgram& program_;
  std::vector<size_t> members_;
  std::string key_;
  BufferRoles roles_;
  std::set<int> reads_, writes_;
  std::set<int> defined_between_;
  // Per input: every member reads it through the same slot (one pointer).
  std::vector<bool> shared_;
  // Per output: the input every member writes it through in place, or -1.
  std::vector<int> in_place_;
};

}  // namespace

bool horizontal_fusion_enabled() {
  const char* value = std::getenv("GROVE_HORIZONTAL_FUSION");
  if (value == nullptr || *value == '\0') {
    return true;
  }
  const std::string text = value;
  GROVE_CHECK_AS(
      ConfigError, text == "0" || text == "1", "GROVE_HORIZONTAL_FUSION='", text,
      "': expected 1 (merge independent elementwise kernels, the default) or 0 (do not)");
  return text == "1";
}

void merge_sibling_kernels(ScheduledProgram& program, bool load_kernels) {
  if (!horizontal_fusion_enabled()) {
    return;
  }
  // Runs of at least two kernels, found left to right, and their merged steps.
  std::vector<std::pair<std::vector<size_t>, Step>> runs;
  Run run(program);
  auto close = [&] {
    if (run.members().size() >= 2) runs.emplace_back(run.members(), run.merged());
    run.clear();
  };
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const Step& step = program.steps[i];
    if (step.kind == StepKind::kView || step.kind == StepKind::kAlias) {
      run.skip(step);
      continue;
    }
    if (step.kind != StepKind::kKernel) {
      close();
      continue;
    }
    if (run.try_add(i)) continue;
    close();
    run.try_add(i);
  }
  close();
  if (runs.empty()) return;

  std::vector<bool> dropped(program.steps.size(), false);
  std::vector<std::optional<Step>> replacement(program.steps.size());
  for (auto& [members, merged] : runs) {
    auto start = std::chrono::steady_clock::now();
    if (load_kernels) {
      merged.kernel.kernel = codegen::compile_kernel(merged.kernel.spec, program.device);
    }
    program.compile_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    replacement[members.front()] = std::move(merged);
    for (size_t k = 1; k < members.size(); ++k) dropped[members[k]] = true;
  }
  std::vector<Step> steps;
  steps.reserve(program.steps.size());
  for (size_t i = 0; i < program.steps.size(); ++i) {
    if (dropped[i]) continue;
    steps.push_back(replacement[i] ? std::move(*replacement[i]) : std::move(program.steps[i]));
  }
  program.steps = std::move(steps);
}

}  // namespace grove::compiler::lowering
