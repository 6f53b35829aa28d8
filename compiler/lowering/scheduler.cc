#include "compiler/lowering/scheduler.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "compiler/lowering/kernel_assembly.h"
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {
namespace {

using runtime::DType;

// One operand of a GEMM seen as a row-major or transposed matrix.
struct MatrixLayout {
  bool transposed = false;
  int64_t ld = 0;
};

std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t row_stride,
                                          int64_t col_stride) {
  if (cols == 1 || col_stride == 1) {
    int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
    if (ld >= std::max<int64_t>(cols, 1)) return MatrixLayout{false, ld};
  }
  if (rows == 1 || row_stride == 1) {
    int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
    if (ld >= std::max<int64_t>(rows, 1)) return MatrixLayout{true, ld};
  }
  return std::nullopt;
}

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
  void schedule_gemm(const LoweringNode& node);
  void schedule_concat(const LoweringNode& node);
  void schedule_host(const LoweringNode& node);
  void schedule_dynamic(int node_index);
  // A contiguous copy of `slot` (for operands a GEMM cannot read as they are).
  int contiguous_copy(int slot, const std::string& node_name);
  void make_outputs_contiguous();
  void add_kernel(AssembledKernel assembled, const std::string& node_name,
                  std::vector<int> allocate);
  void split_segments();
  void compute_releases();

  ScheduledProgram& out_;
  const LoweringGraph& graph_;
  const ScheduleOptions& options_;
  std::map<int, int> substitutes_;
  std::set<int> allocated_;
};

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

int Scheduler::contiguous_copy(int slot, const std::string& node_name) {
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

void Scheduler::schedule_gemm(const LoweringNode& node) {
  int a = node.operands[0];
  int b = node.operands[1];
  const int c = node.results[0];
  const Shape& c_shape = graph_.value(c).type.shape;
  const DType dtype = graph_.value(c).type.dtype;
  GROVE_CHECK_AS(DTypeError, dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                 "lowering: node '", node.name, "' (", node.op, "): GEMMs take f32, bf16 or f16, ",
                 "found ", runtime::dtype_name(dtype), "; cast the operands first");
  auto layout_of = [&](int slot) -> const Layout& {
    return out_.slots[static_cast<size_t>(slot)].layout;
  };
  GemmLaunch launch;
  runtime::GemmArgs& g = launch.args;
  g.dtype = dtype;
  std::vector<GemmCall> calls;
  if (node.transpose_b) {
    // linear: x [..., K] as [M, K]; weight [N, K] read transposed.
    const int64_t k = graph_.value(a).type.shape.back();
    const int64_t n = graph_.value(b).type.shape[0];
    const int64_t m =
        k == 0 ? 0 : runtime::shape_numel(graph_.value(a).type.shape) / std::max<int64_t>(k, 1);
    std::optional<Shape> flat = view_strides(layout_of(a).shape, layout_of(a).strides, {m, k});
    std::optional<MatrixLayout> a_matrix;
    if (flat) a_matrix = matrix_layout(m, k, (*flat)[0], (*flat)[1]);
    if (!a_matrix) {
      a = contiguous_copy(a, node.name);
      a_matrix = MatrixLayout{false, std::max<int64_t>(k, 1)};
    }
    std::optional<MatrixLayout> b_matrix =
        matrix_layout(k, n, layout_of(b).strides[1], layout_of(b).strides[0]);
    if (!b_matrix) {
      b = contiguous_copy(b, node.name);
      b_matrix = matrix_layout(k, n, 1, std::max<int64_t>(k, 1));
    }
    g.m = m, g.n = n, g.k = k;
    g.transpose_a = a_matrix->transposed, g.lda = a_matrix->ld;
    g.transpose_b = b_matrix->transposed, g.ldb = b_matrix->ld;
    g.ldc = std::max<int64_t>(n, 1);
    calls.push_back(GemmCall{});
  } else {
    const Shape a_shape = graph_.value(a).type.shape;
    const Shape b_shape = graph_.value(b).type.shape;
    const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
    const size_t batch_rank = c_shape.size() - 2;
    auto batch_strides = [&](int slot, const Shape& shape) {
      Shape strides(batch_rank, 0);
      const Layout& layout = layout_of(slot);
      size_t lead = batch_rank - (shape.size() - 2);
      for (size_t d = 0; d + 2 < shape.size(); ++d) {
        if (shape[d] != 1) strides[lead + d] = layout.strides[d];
      }
      return strides;
    };
    auto matrix_of = [&](int& slot, int64_t rows, int64_t cols) {
      const Layout& layout = layout_of(slot);
      size_t r = layout.shape.size();
      std::optional<MatrixLayout> matrix =
          matrix_layout(rows, cols, layout.strides[r - 2], layout.strides[r - 1]);
      if (!matrix) {
        slot = contiguous_copy(slot, node.name);
        matrix = MatrixLayout{false, std::max<int64_t>(cols, 1)};
      }
      return *matrix;
    };
    MatrixLayout a_matrix = matrix_of(a, m, k);
    MatrixLayout b_matrix = matrix_of(b, k, n);
    Shape sa = batch_strides(a, a_shape), sb = batch_strides(b, b_shape);
    Shape c_strides = runtime::contiguous_strides(c_shape);
    Shape sc(c_strides.begin(), c_strides.begin() + static_cast<int64_t>(batch_rank));
    Shape sizes(c_shape.begin(), c_shape.begin() + static_cast<int64_t>(batch_rank));
    g.m = m, g.n = n, g.k = k;
    g.transpose_a = a_matrix.transposed, g.lda = a_matrix.ld;
    g.transpose_b = b_matrix.transposed, g.ldb = b_matrix.ld;
    g.ldc = std::max<int64_t>(n, 1);
    // Fold A's batch into M when B is shared by every batch and A's rows are
    // evenly strided across batches (one big GEMM instead of a batch).
    bool b_shared = std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; });
    if (b_shared && !a_matrix.transposed && batch_rank > 0) {
      Shape rows_shape = sizes;
      rows_shape.push_back(m);
      Shape rows_strides = sa;
      rows_strides.push_back(a_matrix.ld);
      bool a_full = true;
      for (size_t d = 0; d < batch_rank; ++d) a_full &= sizes[d] == 1 || sa[d] != 0;
      std::optional<Shape> merged =
          a_full ? view_strides(rows_shape, rows_strides, {runtime::shape_numel(rows_shape)})
                 : std::nullopt;
      if (merged && (runtime::shape_numel(rows_shape) == 1 || (*merged)[0] == a_matrix.ld)) {
        g.m = runtime::shape_numel(rows_shape);
        sizes.clear(), sa.clear(), sb.clear(), sc.clear();
      }
    }
    // Merge batch dims from the innermost while all three operands stay evenly
    // strided; the merged run is one strided-batched GEMM, the rest are loops.
    std::vector<size_t> dims;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] != 1) dims.push_back(d);
    }
    int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
    size_t outer_end = dims.size();
    if (!dims.empty()) {
      size_t last = dims.back();
      batch = sizes[last], stride_a = sa[last], stride_b = sb[last], stride_c = sc[last];
      outer_end = dims.size() - 1;
      while (outer_end > 0) {
        size_t d = dims[outer_end - 1];
        if (sa[d] != stride_a * batch || sb[d] != stride_b * batch || sc[d] != stride_c * batch) {
          break;
        }
        batch *= sizes[d];
        --outer_end;
      }
    }
    g.batch_count = batch, g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
    std::vector<size_t> outer(dims.begin(), dims.begin() + static_cast<int64_t>(outer_end));
    std::vector<int64_t> index(outer.size(), 0);
    while (true) {
      GemmCall call;
      for (size_t i = 0; i < outer.size(); ++i) {
        call.a_offset += index[i] * sa[outer[i]];
        call.b_offset += index[i] * sb[outer[i]];
        call.c_offset += index[i] * sc[outer[i]];
      }
      calls.push_back(call);
      size_t i = outer.size();
      while (i > 0 && ++index[i - 1] == sizes[outer[i - 1]]) index[--i] = 0;
      if (i == 0) break;
    }
  }
  GROVE_CHECK_AS(ShapeError, g.k > 0 || g.m == 0 || g.n == 0, "lowering: node '", node.name, "' (",
                 node.op, ") has an empty inner dimension (K = 0), which is not supported");
  launch.a_slot = a;
  launch.b_slot = b;
  launch.c_slot = c;
  launch.calls = std::move(calls);
  Step step;
  step.kind = StepKind::kGemm;
  step.node_name = node.name;
  step.op = node.op;
  if (allocated_.insert(c).second) step.allocate.push_back(c);
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

void Scheduler::schedule_host(const LoweringNode& node) {
  Step step;
  step.node_name = node.name;
  step.op = node.op;
  step.source = node.operands[0];
  step.result = node.results[0];
  if (node.op == "nonzero") {
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
  switch (node.node_class) {
    case NodeClass::kPointwise:
    case NodeClass::kReduction:
      if (out_.fusion.is_root[static_cast<size_t>(node_index)]) {
        // In-place results share their operand's storage and layout.
        for (size_t r = 0; r < node.in_place_operand.size(); ++r) {
          if (node.in_place_operand[r] < 0) continue;
          const SlotInfo& operand = out_.slots[static_cast<size_t>(
              node.operands[static_cast<size_t>(node.in_place_operand[r])])];
          SlotInfo& result = out_.slots[static_cast<size_t>(node.results[r])];
          result.layout = operand.layout;
          result.root = operand.root;
        }
        schedule_group(node_index);
      }
      break;
    case NodeClass::kView:
      schedule_view(node);
      break;
    case NodeClass::kGemm:
      schedule_gemm(node);
      break;
    case NodeClass::kConcat:
      schedule_concat(node);
      break;
    case NodeClass::kHost:
      schedule_host(node);
      break;
  }
}

// The slots a step reads (needs defined before it) and defines.
void step_slots(const Step& step, std::vector<int>* reads, std::vector<int>* defines) {
  for (int slot : step.allocate) defines->push_back(slot);
  switch (step.kind) {
    case StepKind::kKernel:
      for (int slot : step.kernel.input_slots) reads->push_back(slot);
      for (int slot : step.kernel.output_slots) {
        if (std::find(step.allocate.begin(), step.allocate.end(), slot) == step.allocate.end()) {
          reads->push_back(slot);  // written in place or allocated earlier (concat)
        }
      }
      break;
    case StepKind::kGemm:
      reads->push_back(step.gemm.a_slot);
      reads->push_back(step.gemm.b_slot);
      if (std::find(step.allocate.begin(), step.allocate.end(), step.gemm.c_slot) ==
          step.allocate.end()) {
        reads->push_back(step.gemm.c_slot);
      }
      break;
    case StepKind::kDynamicElementwise:
      for (int slot : step.sources) reads->push_back(slot);
      defines->push_back(step.result);
      break;
    default:
      if (step.source >= 0) reads->push_back(step.source);
      if (step.result >= 0) defines->push_back(step.result);
      break;
  }
}

void Scheduler::split_segments() {
  const bool cpu = out_.device.is_cpu();
  auto blocker_of = [&](const Step& step) {
    switch (step.kind) {
      case StepKind::kNonzero:
      case StepKind::kPrint: {
        const ops::OpDef& def = ops::OpRegistry::global().get(step.op);
        return def.safety(options_.mode) == ops::GraphSafety::kHostOnly
                   ? CaptureBlocker::kHostOnly
                   : CaptureBlocker::kNeedsHostSync;
      }
      case StepKind::kDynamicElementwise:
        return CaptureBlocker::kNeedsHostSync;
      default:
        return CaptureBlocker::kNone;
    }
  };
  for (size_t i = 0; i < out_.steps.size(); ++i) {
    CaptureBlocker blocker = blocker_of(out_.steps[i]);
    bool extend = !out_.segments.empty() && blocker == CaptureBlocker::kNone &&
                  out_.segments.back().blocker == CaptureBlocker::kNone;
    if (!extend) {
      SegmentPlan segment;
      segment.first_step = i;
      segment.blocker = blocker;
      if (blocker != CaptureBlocker::kNone) {
        segment.op = out_.steps[i].op;
        segment.node_name = out_.steps[i].node_name;
      }
      out_.segments.push_back(segment);
    }
    out_.segments.back().end_step = i + 1;
  }
  // Which segment defines each slot, and the last segment that reads it.
  std::vector<int> defined_in(out_.slots.size(), -1);
  std::vector<int> last_read(out_.slots.size(), -1);
  for (size_t s = 0; s < out_.segments.size(); ++s) {
    SegmentPlan& segment = out_.segments[s];
    std::set<int> inputs;
    for (size_t i = segment.first_step; i < segment.end_step; ++i) {
      const Step& step = out_.steps[i];
      std::vector<int> reads, defines;
      step_slots(step, &reads, &defines);
      for (int slot : reads) {
        if (defined_in[static_cast<size_t>(slot)] != static_cast<int>(s)) inputs.insert(slot);
        last_read[static_cast<size_t>(slot)] = static_cast<int>(s);
      }
      for (int slot : defines) defined_in[static_cast<size_t>(slot)] = static_cast<int>(s);
      if (step.kind == StepKind::kKernel || step.kind == StepKind::kDynamicElementwise) {
        ++segment.kernel_count;
      }
      if (step.kind == StepKind::kGemm) segment.gemm_count += step.gemm.calls.size();
    }
    segment.input_slots.assign(inputs.begin(), inputs.end());
    if (cpu && segment.blocker == CaptureBlocker::kNone) {
      segment.blocker = CaptureBlocker::kCpuTensors;
    }
  }
  std::set<int> program_outputs(out_.output_slots.begin(), out_.output_slots.end());
  for (size_t s = 0; s < out_.segments.size(); ++s) {
    SegmentPlan& segment = out_.segments[s];
    for (size_t slot = 0; slot < out_.slots.size(); ++slot) {
      if (defined_in[slot] != static_cast<int>(s)) continue;
      if (program_outputs.count(static_cast<int>(slot)) || last_read[slot] > static_cast<int>(s)) {
        segment.output_slots.push_back(static_cast<int>(slot));
      }
    }
    for (size_t slot = 0; slot < out_.slots.size(); ++slot) {
      if (program_outputs.count(static_cast<int>(slot))) continue;
      int last = std::max(last_read[slot], defined_in[slot]);
      if (last == static_cast<int>(s)) segment.drop_after.push_back(static_cast<int>(slot));
    }
  }
}

void Scheduler::compute_releases() {
  std::vector<int> last_use(out_.slots.size(), -1);
  for (size_t i = 0; i < out_.steps.size(); ++i) {
    std::vector<int> reads, defines;
    step_slots(out_.steps[i], &reads, &defines);
    for (int slot : reads) last_use[static_cast<size_t>(slot)] = static_cast<int>(i);
    for (int slot : defines) last_use[static_cast<size_t>(slot)] = static_cast<int>(i);
  }
  std::set<int> keep(out_.output_slots.begin(), out_.output_slots.end());
  for (const SegmentPlan& segment : out_.segments) {
    // A segment's outputs leave through its return value; keep them to the end.
    keep.insert(segment.output_slots.begin(), segment.output_slots.end());
  }
  for (size_t slot = 0; slot < out_.slots.size(); ++slot) {
    if (last_use[slot] < 0 || keep.count(static_cast<int>(slot))) continue;
    out_.steps[static_cast<size_t>(last_use[slot])].release.push_back(static_cast<int>(slot));
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
  for (size_t n = 0; n < graph_.nodes().size(); ++n) schedule_node(static_cast<int>(n));
  make_outputs_contiguous();
  split_segments();
  compute_releases();
}

}  // namespace

ScheduledProgram schedule_program(const ir::Program& program, const ScheduleOptions& options) {
  ScheduledProgram out;
  out.program = std::make_shared<const ir::Program>(program);
  out.graph = std::make_shared<const LoweringGraph>(*out.program);
  out.fusion = plan_fusion(*out.graph);
  out.device = program.device();
  Scheduler(out, options).run();
  return out;
}

}  // namespace grove::compiler::lowering
