#include "compiler/lowering/scheduler.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "compiler/lowering/attention_kernel.h"
#include "compiler/lowering/gemm_plan.h"
#include "compiler/lowering/grouped_attention_keys.h"
#include "compiler/lowering/horizontal_fusion.h"
#include "compiler/lowering/kernel_assembly.h"
#include "compiler/lowering/segment_split.h"
#include "compiler/lowering/sibling_gemms.h"
#include "compiler/lowering/small_m_gemm.h"
#include "compiler/lowering/tiny_k_gemm.h"
#include "compiler/ops/op_helpers.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/sequence_attention_kernel.h"

namespace grove::compiler::lowering {
namespace {

using runtime::DType;

class Scheduler {
 public:
  Scheduler(ScheduledProgram& out, const ScheduleOptions& options)
      : out_(out), graph_(*out.graph), options_(options) {}

  void run();

 private:
  int add_temp(const std::string& name, DType dtype, const Layout& layout);
  void set_value_layouts();
  void schedule_node(int node_index);
  void schedule_group(int root);
  void schedule_view(const LoweringNode& node);
  void schedule_gemm(int node_index);
  void schedule_concat(const LoweringNode& node);
  void schedule_host(const LoweringNode& node);
  void schedule_dynamic(int node_index);
  void schedule_attention(int node_index);
  bool schedule_sequence_attention(int node_index);
  // A contiguous copy of `slot` (for operands a GEMM cannot read as they are).
  // `node_name` is taken by value: callers pass a slot's own name, and
  // add_temp() may reallocate out_.slots.
  int contiguous_copy(int slot, std::string node_name);
  void make_outputs_contiguous();
  void add_kernel(AssembledKernel assembled, const std::string& node_name,
                  std::vector<int> allocate);
  void plan_forwarding();
  void emit_alias(int source, int result, const std::string& node_name, const std::string& op);

  ScheduledProgram& out_;
  const LoweringGraph& graph_;
  const ScheduleOptions& options_;
  std::map<int, int> substitutes_;
  std::set<int> allocated_;
  // Note [Results written into their destination]: value -> destination slot.
  std::map<int, int> forwarded_;
  std::set<int> forwarded_copies_;  // copy_into nodes that launch nothing
};

// Note [Results written into their destination]: `copy_into(dst, v)` where
// dst is a program input read by nothing else (a backward's gradient buffer)
// and v (possibly through reshapes, each read only by the next) is
// materialized by a GEMM or a fusion root, read only by the copy, with dst's
// dtype and element count: v's slot is made a contiguous view of dst, so the
// GEMM or kernel that computes v writes dst directly and the copy launches
// nothing (an alias step). Writing dst earlier than the copy would is invisible, because
// nothing else in the program reads dst. dst stays in the mutated inputs
// (lower.cc counts GEMM results written into inputs).
void Scheduler::plan_forwarding() {
  const auto& uses = graph_.uses();
  for (size_t n = 0; n < graph_.nodes().size(); ++n) {
    const LoweringNode& node = graph_.node(static_cast<int>(n));
    if (node.op != "copy_into" || node.node_class != NodeClass::kPointwise ||
        node.operands.size() != 2 || node.in_place_operand.empty() ||
        node.in_place_operand[0] != 0) {
      continue;
    }
    const int destination = node.operands[0];
    const LoweringValue& to = graph_.value(destination);
    if (to.producer >= 0 || to.input_position < 0 || to.dynamic()) continue;
    if (uses[static_cast<size_t>(destination)].size() != 1) continue;
    // Walk back through reshapes read only by the next step of the chain.
    int source = node.operands[1];
    auto single_use = [&](int value) {
      const LoweringValue& v = graph_.value(value);
      return !v.is_output && !v.dynamic() && uses[static_cast<size_t>(value)].size() == 1;
    };
    if (!single_use(source)) continue;
    while (graph_.value(source).producer >= 0) {
      const LoweringNode& view = graph_.node(graph_.value(source).producer);
      if (view.node_class != NodeClass::kView || view.op != "reshape" ||
          !single_use(view.operands[0])) {
        break;
      }
      source = view.operands[0];
    }
    const LoweringValue& from = graph_.value(source);
    if (from.producer < 0 || from.type.dtype != to.type.dtype ||
        runtime::shape_numel(from.type.shape) != runtime::shape_numel(to.type.shape) ||
        out_.fusion.inlined[static_cast<size_t>(source)] || forwarded_.count(source)) {
      continue;
    }
    if (node.operands[1] == source && from.type.shape != to.type.shape) continue;
    const LoweringNode& producer = graph_.node(from.producer);
    bool writes_fresh = false;
    if (producer.node_class == NodeClass::kGemm) {
      writes_fresh = true;
    } else if (producer.node_class == NodeClass::kPointwise ||
               producer.node_class == NodeClass::kReduction) {
      writes_fresh = out_.fusion.is_root[static_cast<size_t>(from.producer)] ||
                     out_.fusion.written_by[static_cast<size_t>(source)] >= 0;
      for (size_t r = 0; r < producer.results.size(); ++r) {
        if (producer.results[r] == source && producer.node_class == NodeClass::kPointwise &&
            producer.in_place_operand[r] >= 0) {
          writes_fresh = false;
        }
      }
    }
    if (!writes_fresh) continue;
    SlotInfo& slot = out_.slots[static_cast<size_t>(source)];
    const SlotInfo& target = out_.slots[static_cast<size_t>(destination)];
    if (!target.layout.is_contiguous() || target.layout.offset != 0) continue;
    slot.layout = Layout::contiguous(from.type.shape);
    slot.root = target.root;
    forwarded_[source] = destination;
    forwarded_copies_.insert(static_cast<int>(n));
  }
}

void Scheduler::emit_alias(int source, int result, const std::string& node_name,
                           const std::string& op) {
  Step alias;
  alias.kind = StepKind::kAlias;
  alias.node_name = node_name;
  alias.op = op;
  alias.source = source;
  alias.result = result;
  allocated_.insert(result);
  out_.steps.push_back(std::move(alias));
}

int Scheduler::add_temp(const std::string& name, DType dtype, const Layout& layout) {
  SlotInfo info{name, dtype, layout, static_cast<int>(out_.slots.size()), false};
  out_.slots.push_back(info);
  return info.root;
}

void Scheduler::set_value_layouts() {
  out_.slots.resize(graph_.values().size());
  for (size_t v = 0; v < graph_.values().size(); ++v) {
    const LoweringValue& value = graph_.value(static_cast<int>(v));
    SlotInfo& slot = out_.slots[v];
    slot.name = value.name;
    slot.dtype = value.type.dtype;
    slot.dynamic = value.dynamic();
    slot.root = static_cast<int>(v);
    if (!slot.dynamic) slot.layout = Layout::contiguous(value.type.shape);
  }
}

void Scheduler::add_kernel(AssembledKernel assembled, const std::string& node_name,
                           std::vector<int> allocate) {
  Step step;
  step.kind = StepKind::kKernel;
  step.node_name = node_name;
  step.op = assembled.spec.name;
  for (int slot : allocate) {
    if (allocated_.insert(slot).second) step.allocate.push_back(slot);
  }
  // Note [No kernel over no elements]: an elementwise kernel over an empty
  // iteration space (an inference batch norm's saved statistics, shape [0])
  // would launch for nothing; its slots are still allocated (empty) here. A
  // reduction still runs: its rows may be non-empty with empty reduced dims
  // (a sum over a dim of size 0 writes zeros). Test: Kernels.NoneForEmptyValues
  // (tests/compiler/lowering/ops_lowering_test.cc).
  if (runtime::shape_numel(assembled.spec.iteration_shape) == 0 &&
      assembled.spec.reductions.empty()) {
    step.kind = StepKind::kAlias;
    out_.steps.push_back(std::move(step));
    return;
  }
  auto start = std::chrono::steady_clock::now();
  if (options_.load_kernels)
    step.kernel.kernel = codegen::compile_kernel(assembled.spec, out_.device);
  out_.compile_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  step.kernel.spec = std::move(assembled.spec);
  step.kernel.input_slots = std::move(assembled.input_slots);
  step.kernel.output_slots = std::move(assembled.output_slots);
  step.kernel.output_offsets = std::move(assembled.output_offsets);
  out_.steps.push_back(std::move(step));
}

int Scheduler::contiguous_copy(int slot, std::string node_name) {
  const SlotInfo info = out_.slots[static_cast<size_t>(slot)];
  int temp = add_temp(info.name + ".contiguous", info.dtype, Layout::contiguous(info.layout.shape));
  KernelAssembler assembler(graph_, out_.fusion, out_.slots, substitutes_);
  add_kernel(assembler.copy(slot, temp, "copy"), node_name, {temp});
  return temp;
}

void Scheduler::schedule_group(int root) {
  const LoweringNode& node = graph_.node(root);
  substitutes_.clear();
  std::vector<int> allocate;
  for (size_t r = 0; r < node.results.size(); ++r) {
    bool in_place = node.node_class == NodeClass::kPointwise && node.in_place_operand[r] >= 0;
    if (!in_place) allocate.push_back(node.results[r]);
  }
  // Note [Reduction prologues]: the kernel also writes its row operand.
  for (int value : out_.fusion.extra_outputs[static_cast<size_t>(root)]) allocate.push_back(value);
  int row_values = -1;
  int64_t rows = 0;
  if (node.node_class == NodeClass::kReduction && reduction_plan(node).mean_over_rows) {
    ReductionFrame frame = reduction_frame(graph_, node);
    Shape row_shape(frame.iteration_shape.begin(), frame.iteration_shape.end() - 1);
    rows = runtime::shape_numel(row_shape);
    row_values = add_temp(node.name + ".rows", DType::kF32, Layout::contiguous(row_shape));
  }
  for (int attempt = 0;; ++attempt) {
    try {
      KernelAssembler assembler(graph_, out_.fusion, out_.slots, substitutes_);
      AssembledKernel kernel = assembler.group(root, row_values);
      add_kernel(std::move(kernel), node.name,
                 row_values >= 0 ? std::vector<int>{row_values} : allocate);
      break;
    } catch (const NeedsRelayout& relayout) {
      GROVE_CHECK(attempt < 16, "lowering: node '", node.name,
                  "' keeps needing relaid copies (a grove bug; please report it)");
      const SlotInfo info = out_.slots[static_cast<size_t>(relayout.value)];
      int temp = add_temp(info.name + ".relaid", info.dtype,
                          KernelAssembler::relayout_for(info.layout.shape, relayout.map));
      KernelAssembler assembler(graph_, out_.fusion, out_.slots, substitutes_);
      add_kernel(assembler.copy(relayout.value, temp, "relayout"), node.name, {temp});
      substitutes_[relayout.value] = temp;
    }
  }
  if (row_values >= 0) {
    KernelAssembler assembler(graph_, out_.fusion, out_.slots, substitutes_);
    add_kernel(assembler.row_mean(row_values, node.results[0], rows), node.name, allocate);
  }
  for (size_t r = 0; r < node.results.size(); ++r) {
    if (node.node_class != NodeClass::kPointwise || node.in_place_operand[r] < 0) continue;
    Step alias;
    alias.kind = StepKind::kAlias;
    alias.node_name = node.name;
    alias.op = node.op;
    alias.source = node.operands[static_cast<size_t>(node.in_place_operand[r])];
    alias.result = node.results[r];
    out_.steps.push_back(std::move(alias));
  }
}

void Scheduler::schedule_view(const LoweringNode& node) {
  const int source = node.operands[0];
  const int result = node.results[0];
  const SlotInfo& from = out_.slots[static_cast<size_t>(source)];
  SlotInfo& to = out_.slots[static_cast<size_t>(result)];
  const int64_t rank = static_cast<int64_t>(from.layout.shape.size());
  Layout layout = from.layout;
  const ir::Attributes& attrs = node.context.attrs;
  if (node.op == "transpose") {
    auto d0 =
        static_cast<size_t>(ops::normalize_dim(node.context, attrs.get_int("dim0"), rank, "dim0"));
    auto d1 =
        static_cast<size_t>(ops::normalize_dim(node.context, attrs.get_int("dim1"), rank, "dim1"));
    std::swap(layout.shape[d0], layout.shape[d1]);
    std::swap(layout.strides[d0], layout.strides[d1]);
  } else if (node.op == "permute") {
    const std::vector<int64_t>& order = attrs.get_ints("order");
    for (size_t i = 0; i < order.size(); ++i) {
      auto d = static_cast<size_t>(ops::normalize_dim(node.context, order[i], rank, "order"));
      layout.shape[i] = from.layout.shape[d];
      layout.strides[i] = from.layout.strides[d];
    }
  } else if (node.op == "slice") {
    auto d =
        static_cast<size_t>(ops::normalize_dim(node.context, attrs.get_int("dim"), rank, "dim"));
    auto [begin, end] =
        ops::slice_bounds(attrs.get_int("start"), attrs.get_int("end"), layout.shape[d]);
    layout.offset += begin * layout.strides[d];
    layout.shape[d] = end - begin;
  } else if (node.op == "reshape") {
    const Shape& shape = graph_.value(result).type.shape;
    std::optional<Shape> strides = view_strides(from.layout.shape, from.layout.strides, shape);
    if (!strides) {
      // A reshape of a value whose elements are not laid out compatibly is a
      // copy into contiguous memory, which the result then views.
      int temp = contiguous_copy(source, node.name);
      SlotInfo& copied = out_.slots[static_cast<size_t>(result)];
      copied.layout = Layout::contiguous(shape);
      copied.root = temp;
      Step view;
      view.kind = StepKind::kView;
      view.node_name = node.name;
      view.op = node.op;
      view.source = temp;
      view.result = result;
      out_.steps.push_back(std::move(view));
      return;
    }
    layout.shape = shape;
    layout.strides = *strides;
  } else {
    throw Error(str_cat("lowering: node '", node.name, "': unknown view op '", node.op, "'"));
  }
  to.layout = layout;
  to.root = from.root;
  Step view;
  view.kind = StepKind::kView;
  view.node_name = node.name;
  view.op = node.op;
  view.source = source;
  view.result = result;
  out_.steps.push_back(std::move(view));
}

void Scheduler::schedule_gemm(int node_index) {
  const LoweringNode& node = graph_.node(node_index);
  // Note [Attention results with heads last] (attention_kernel.cc).
  if (std::optional<Layout> layout = matmul_result_layout(graph_, node_index)) {
    out_.slots[static_cast<size_t>(node.results[0])].layout = *layout;
  }
  GemmLaunch launch = plan_gemm(graph_, node, out_.slots,
                                [&](int slot) { return contiguous_copy(slot, node.name); });
  const SmallMVariant small_m =
      small_m_gemm_variant(launch, out_.device, options_.load_kernels, options_.small_m_gemm);
  SmallMVariant small_n;
  if (!small_m.tiled) {
    if (small_m) {
      // Note [Small-M GEMM selection]: grove's kernel instead of a library call.
      add_kernel(small_m_gemm_kernel(launch, small_m.rows, /*transposed=*/false, small_m.columns),
                 node.name, launch.written_slots());
      return;
    }
    small_n =
        small_n_gemm_variant(launch, out_.device, options_.load_kernels, options_.small_m_gemm);
    if (small_n && !small_n.tiled) {
      // Note [Small-N GEMMs as their transpose].
      add_kernel(small_m_gemm_kernel(launch, small_n.rows, /*transposed=*/true, small_n.columns),
                 node.name, launch.written_slots());
      return;
    }
  }
  if (small_m.tiled || small_n.tiled) {
    // Note [Small-M tiled GEMM]: cuda's tiled kernel, through the device's BLAS;
    // a small-N GEMM's as its transpose (Note [Small-N GEMMs as their transpose]).
    const SmallMVariant& tile = small_m.tiled ? small_m : small_n;
    launch.args.tile_rows = static_cast<int32_t>(tile.rows);
    launch.args.tile_columns = static_cast<int32_t>(tile.columns);
    launch.args.tile_warps = static_cast<int32_t>(tile.warps);
    launch.args.tile_exact_gelu = small_m.tiled && launch.exact_gelu;
    launch.args.tile_transposed = small_n.tiled;
  } else if (tiny_k_gemm_chosen(launch, out_.device, options_.load_kernels,
                                options_.small_m_gemm)) {
    // Note [Tiny-K GEMM kernel].
    add_kernel(tiny_k_gemm_kernel(launch), node.name, launch.written_slots());
    return;
  }
  GROVE_CHECK(!launch.exact_gelu || small_m.tiled, "lowering: node '", node.name,
              "' carries the exact gelu to a library GEMM, which cannot apply it (a grove bug; "
              "please report it; GROVE_SMALL_M_EXACT_GELU=0 and GROVE_TINY_K_EXACT_GELU=0 avoid "
              "it)");
  launch.args.search = options_.gemm_search;
  Step step;
  step.kind = StepKind::kGemm;
  step.node_name = node.name;
  step.op = node.op;
  for (int slot : launch.written_slots()) {
    if (allocated_.insert(slot).second) step.allocate.push_back(slot);
  }
  step.gemm = std::move(launch);
  out_.steps.push_back(std::move(step));
}

void Scheduler::schedule_concat(const LoweringNode& node) {
  const int result = node.results[0];
  const SlotInfo& to = out_.slots[static_cast<size_t>(result)];
  const int64_t rank = static_cast<int64_t>(to.layout.shape.size());
  auto d = static_cast<size_t>(
      ops::normalize_dim(node.context, node.context.attrs.get_int("dim"), rank, "dim"));
  int64_t start = 0;
  std::vector<int> allocate = {result};
  // Note [One kernel for a concat of equal parts] (kernel_assembly.cc).
  const Shape& first = graph_.value(node.operands[0]).type.shape;
  const bool equal_parts =
      node.operands.size() >= 2 && node.operands.size() <= kMaxConcatParts &&
      runtime::shape_numel(first) > 0 &&
      std::all_of(node.operands.begin(), node.operands.end(),
                  [&](int operand) { return graph_.value(operand).type.shape == first; });
  if (equal_parts) {
    std::optional<AssembledKernel> kernel;
    try {
      KernelAssembler assembler(graph_, out_.fusion, out_.slots, substitutes_);
      kernel =
          assembler.concat_of_equal_parts(node.operands, result, first[d] * to.layout.strides[d]);
    } catch (const NeedsRelayout&) {
      // A part read through a layout the part map cannot index: one kernel per part.
    }
    if (kernel) {
      add_kernel(std::move(*kernel), node.name, allocate);
      return;
    }
  }
  for (int operand : node.operands) {
    const Shape& shape = graph_.value(operand).type.shape;
    if (runtime::shape_numel(shape) > 0) {
      KernelAssembler assembler(graph_, out_.fusion, out_.slots, substitutes_);
      add_kernel(assembler.concat_part(operand, result, start * to.layout.strides[d]), node.name,
                 allocate);
    }
    start += shape[d];
  }
  if (allocated_.insert(result).second) {
    // Every operand was empty: the result still needs its (empty) memory.
    Step step;
    step.kind = StepKind::kAlias;
    step.node_name = node.name;
    step.op = node.op;
    step.allocate = {result};
    out_.steps.push_back(std::move(step));
  }
}

// Note [Launch hooks with fresh results]
// An OpDef::launch hook works in place (result r is operand r) when its op
// lists mutated operands (collectives, linear_residual, decode_attention).
// An op with a launch hook and no mutated operand is pure: its results are
// fresh slots, allocated by the step (Step::allocate) and passed to the hook
// after its operands, and no root is written in place (written_roots).
// Test: RmsNormLinear.* (tests/serving/llm/rms_norm_linear_test.cc: the
// rms_norm_linear op lowered and run against rms_norm then linear).
void Scheduler::schedule_host(const LoweringNode& node) {
  Step step;
  step.node_name = node.name;
  step.op = node.op;
  step.source = node.operands[0];
  step.result = node.results[0];
  if (node.def->launch && node.def->effects.mutated_operands.empty()) {
    // Note [Launch hooks with fresh results]: an OpDef::launch op that
    // mutates none of its operands computes its results into fresh tensors,
    // allocated before the step and handed to the hook after the operands.
    step.kind = StepKind::kLaunch;
    step.sources = node.operands;
    step.results = node.results;
    step.graph_node = static_cast<int>(&node - graph_.nodes().data());
    for (int result : node.results) {
      if (allocated_.insert(result).second) step.allocate.push_back(result);
    }
    GROVE_CHECK(step.allocate.size() == node.results.size(), "lowering: node '", node.name,
                "': a launch hook's fresh result was allocated before (a grove bug)");
  } else if (node.def->launch) {
    // In place: result r is operand r (OpDef::launch).
    step.kind = StepKind::kLaunch;
    step.sources = node.operands;
    step.results = node.results;
    step.graph_node = static_cast<int>(&node - graph_.nodes().data());
    GROVE_CHECK(node.results.size() <= node.operands.size(), "lowering: node '", node.name,
                "': op '", node.op, "' has a launch hook and more results than operands ",
                "(launch hooks work in place: result r is operand r)");
    for (size_t r = 0; r < node.results.size(); ++r) {
      SlotInfo& to = out_.slots[static_cast<size_t>(node.results[r])];
      const SlotInfo& from = out_.slots[static_cast<size_t>(node.operands[r])];
      to.layout = from.layout;
      to.root = from.root;
    }
  } else if (node.op == "nonzero") {
    step.kind = StepKind::kNonzero;
  } else if (node.op == "print") {
    step.kind = StepKind::kPrint;
    step.message = node.context.attrs.get_string("message");
    SlotInfo& to = out_.slots[static_cast<size_t>(step.result)];
    const SlotInfo& from = out_.slots[static_cast<size_t>(step.source)];
    to.layout = from.layout;
    to.root = from.root;
  } else {
    throw Error(str_cat("lowering: node '", node.name, "': op '", node.op,
                        "' has no lowering (a special op the lowering does not know)"));
  }
  out_.steps.push_back(std::move(step));
}

// Note [Attention on the sequence attention kernel]
// An attention node whose operands the runtime's sequence attention kernel
// takes (Note [Sequence attention kernel], runtime/sequence_attention_kernel.h:
// short sequences, heads that fit its shared memory, leading dims that
// collapse) is one launch step of the op's hook (Note [Launch hooks with
// fresh results]): it reads query, key and value where they are, strided
// views of a fused projection included, so the positions-major copies of
// Note [Keys and values by position] are not made, and writes the result in
// the layout Note [Attention results with heads last] chose. Other attention
// nodes run the generated kernel (ScheduleOptions::sequence_attention = false
// asks for it everywhere). On an H100 the generated kernel, which reduces
// every output feature across a warp, had been slower than the written-out
// attention (session 15); the sequence kernel is one launch with no copies:
// round 1 of session 17 (torch_zoo --attention-ab, its first version) timed
// GPT-2 at batch 16 at 150.9 against 169.2 us written out, ViT 611.6 against
// 740.1, BART 268.9 against 322.5, and at batch 1 GPT-2 124.9 against 139.4
// and ViT 357.6 against 370.0. Tests: AttentionLowering.*
// (tests/compiler/lowering/attention_kernel_test.cc).
bool Scheduler::schedule_sequence_attention(int node_index) {
  const LoweringNode& node = graph_.node(node_index);
  if (!options_.sequence_attention) return false;
  auto layout_of = [&](int value) {
    const SlotInfo& slot = out_.slots[static_cast<size_t>(value)];
    return runtime::AttentionOperandLayout{slot.layout.shape, slot.layout.strides};
  };
  runtime::SequenceAttentionLayouts layouts;
  layouts.dtype = out_.slots[static_cast<size_t>(node.operands[0])].dtype;
  layouts.query = layout_of(node.operands[0]);
  layouts.key = layout_of(node.operands[1]);
  layouts.value = layout_of(node.operands[2]);
  layouts.result = layout_of(node.results[0]);
  if (node.operands.size() == 4) {
    layouts.mask = layout_of(node.operands[3]);
    layouts.mask_dtype = out_.slots[static_cast<size_t>(node.operands[3])].dtype;
  }
  if (!runtime::sequence_attention_refusal(layouts).empty()) return false;
  Step step;
  step.kind = StepKind::kLaunch;
  step.node_name = node.name;
  step.op = node.op;
  step.sources = node.operands;
  step.results = node.results;
  step.graph_node = node_index;
  if (allocated_.insert(node.results[0]).second) step.allocate.push_back(node.results[0]);
  GROVE_CHECK(step.allocate.size() == 1, "lowering: node '", node.name,
              "': the attention's result was allocated before (a grove bug)");
  out_.steps.push_back(std::move(step));
  return true;
}

void Scheduler::schedule_attention(int node_index) {
  const LoweringNode& node = graph_.node(node_index);
  // Note [Attention results with heads last].
  if (std::optional<Layout> layout = attention_result_layout(graph_, node_index)) {
    out_.slots[static_cast<size_t>(node.results[0])].layout = *layout;
  }
  if (schedule_sequence_attention(node_index)) return;
  // Note [Keys and values by position]: the kernel reads copies of key and value.
  LoweringNode reading = node;
  std::vector<int> sources, copies;
  for (size_t position : {size_t{1}, size_t{2}}) {
    if (position == 2 && node.operands[2] == node.operands[1]) {
      reading.operands[2] = reading.operands[1];  // one tensor for both: one copy
      continue;
    }
    const SlotInfo operand = out_.slots[static_cast<size_t>(node.operands[position])];
    if (positions_major(operand.layout)) continue;
    const int copy = add_temp(operand.name + ".by_position", operand.dtype,
                              positions_major_layout(operand.layout.shape));
    reading.operands[position] = copy;
    sources.push_back(node.operands[position]);
    copies.push_back(copy);
  }
  for (AssembledKernel& kernel : positions_major_copies(out_.slots, sources, copies)) {
    std::vector<int> allocate = kernel.output_slots;
    add_kernel(std::move(kernel), node.name, std::move(allocate));
  }
  add_kernel(attention_kernel(reading, out_.slots), node.name, {node.results[0]});
}

void Scheduler::schedule_dynamic(int node_index) {
  const LoweringNode& node = graph_.node(node_index);
  GROVE_CHECK(node.node_class == NodeClass::kPointwise && node.pointwise == PointwiseKind::kHook &&
                  !node.in_place(),
              "lowering: node '", node.name, "' (", node.op,
              ") reads a value with a data-dependent shape; only elementwise ops, print and "
              "cast can follow nonzero");
  Step step;
  step.kind = StepKind::kDynamicElementwise;
  step.node_name = node.name;
  step.op = node.op;
  step.sources = node.operands;
  step.source = node.operands.empty() ? -1 : node.operands[0];
  step.result = node.results[0];
  step.graph_node = node_index;
  out_.steps.push_back(std::move(step));
}

void Scheduler::schedule_node(int node_index) {
  const LoweringNode& node = graph_.node(node_index);
  bool dynamic = false;
  for (int operand : node.operands) dynamic |= graph_.value(operand).dynamic();
  if (dynamic && node.node_class != NodeClass::kHost) {
    schedule_dynamic(node_index);
    return;
  }
  if (forwarded_copies_.count(node_index)) {
    SlotInfo& result = out_.slots[static_cast<size_t>(node.results[0])];
    const SlotInfo& destination = out_.slots[static_cast<size_t>(node.operands[0])];
    result.layout = destination.layout;
    result.root = destination.root;
    emit_alias(node.operands[0], node.results[0], node.name, node.op);
    return;
  }
  // A result forwarded into its copy's destination is that destination's view.
  auto alias_forwarded = [&](const LoweringNode& of) {
    for (int result : of.results) {
      auto forwarded = forwarded_.find(result);
      if (forwarded != forwarded_.end()) emit_alias(forwarded->second, result, of.name, "forward");
    }
  };
  // Note [Reduction prologues]: a reduction that took this node's group launches here.
  const int hoisted = out_.fusion.launches_here[static_cast<size_t>(node_index)];
  const bool launched_earlier = !out_.fusion.extra_outputs[static_cast<size_t>(node_index)].empty();
  if (hoisted >= 0) {
    alias_forwarded(node);
    alias_forwarded(graph_.node(hoisted));
    schedule_group(hoisted);
    return;
  }
  if (!launched_earlier) alias_forwarded(node);
  switch (node.node_class) {
    case NodeClass::kPointwise:
    case NodeClass::kReduction:
      if (out_.fusion.is_root[static_cast<size_t>(node_index)] && !launched_earlier) {
        // In-place results share their operand's storage and layout.
        for (size_t r = 0; r < node.in_place_operand.size(); ++r) {
          if (node.in_place_operand[r] < 0) continue;
          const SlotInfo& operand = out_.slots[static_cast<size_t>(
              node.operands[static_cast<size_t>(node.in_place_operand[r])])];
          SlotInfo& result = out_.slots[static_cast<size_t>(node.results[r])];
          result.layout = operand.layout;
          result.root = operand.root;
        }
        // Note [Kernel results laid out for a transposed reshape] (attention_kernel.h).
        for (size_t r = 0; r < node.results.size(); ++r) {
          const int result = node.results[r];
          const bool in_place = r < node.in_place_operand.size() && node.in_place_operand[r] >= 0;
          if (in_place || forwarded_.count(result) || allocated_.count(result)) continue;
          if (std::optional<Layout> layout = transposed_reshape_layout(graph_, result)) {
            out_.slots[static_cast<size_t>(result)].layout = *layout;
          }
        }
        schedule_group(node_index);
      }
      break;
    case NodeClass::kView:
      schedule_view(node);
      break;
    case NodeClass::kGemm:
      schedule_gemm(node_index);
      break;
    case NodeClass::kConcat:
      schedule_concat(node);
      break;
    case NodeClass::kHost:
      schedule_host(node);
      break;
    case NodeClass::kAttention:
      schedule_attention(node_index);
      break;
  }
}

// Note [Contiguous outputs]: callers (and the next lowered function, e.g. a
// backward that takes a forward's saved activations) require contiguous
// tensors, because kernels bake strides in. An output that is a strided view
// of a value the program computed is therefore copied into contiguous memory;
// views of program inputs stay views, so their aliasing is kept.
void Scheduler::make_outputs_contiguous() {
  std::set<int> inputs(out_.input_slots.begin(), out_.input_slots.end());
  for (int& slot : out_.output_slots) {
    const SlotInfo& info = out_.slots[static_cast<size_t>(slot)];
    if (info.dynamic || info.layout.is_contiguous() || inputs.count(info.root)) continue;
    slot = contiguous_copy(slot, info.name);
  }
}

void Scheduler::run() {
  set_value_layouts();
  for (int input : graph_.inputs()) allocated_.insert(input);
  out_.input_slots = graph_.inputs();
  out_.output_slots = graph_.outputs();
  plan_forwarding();
  for (size_t n = 0; n < graph_.nodes().size(); ++n) schedule_node(static_cast<int>(n));
  make_outputs_contiguous();
  merge_sibling_kernels(out_, options_.load_kernels);
  split_segments(out_, options_.mode);
  compute_releases(out_);
}

}  // namespace

ScheduledProgram schedule_program(const ir::Program& program, const ScheduleOptions& options) {
  ScheduledProgram out;
  // Note [Grouped-query keys read whole] (grouped_attention_keys.h), where on.
  std::optional<ir::Program> grouped;
  if (grouped_attention_keys_enabled()) grouped = read_grouped_attention_keys(program);
  const ir::Program& source = grouped ? *grouped : program;
  // Note [Sibling GEMMs as one] (sibling_gemms.h): the rewrite, where on.
  std::optional<ir::Program> fused;
  // Note [Wide sibling GEMMs of inference on cuda]: the default scope.
  const SiblingGemmScope scope =
      options.sibling_gemms ? SiblingGemmScope::kAll : sibling_gemm_scope();
  if (scope != SiblingGemmScope::kNone) fused = fuse_sibling_gemms(source, scope);
  out.program = std::make_shared<const ir::Program>(fused ? std::move(*fused) : source);
  out.graph = std::make_shared<const LoweringGraph>(*out.program, options.small_m_gemm);
  out.fusion = plan_fusion(*out.graph);
  out.device = program.device();
  Scheduler(out, options).run();
  // Note [Kernels loaded in the background] (runtime/cuda/kernel_loader.cc):
  // the program returns with its kernels JITed, and throws a failed JIT here.
  if (options.load_kernels) runtime::device_context(out.device).platform().wait_for_kernel_loads();
  return out;
}

}  // namespace grove::compiler::lowering
