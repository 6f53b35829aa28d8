#include "compiler/lowering/kernel_assembly.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "compiler/lowering/reduction_prologue.h"
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {

using codegen::ExprOp;
using runtime::DType;

// Note [Merged reduction dims]: a reduction kernel iterates over
// [kept dims of the row operand..., product of its reduced dims], so the row
// is always the innermost iteration dim. A value dim that is reduced maps to
// that last dim with `inner` = the product of the sizes of the reduced dims
// after it. A buffer can be read that way only if its reduced dims are evenly
// strided (stride_j = s * inner_j for one s): true for a contiguous operand
// reduced over trailing dims, false e.g. for sum over dims [0, 2]. Then the
// scheduler first copies the value into relayout_for()'s layout.
ReductionFrame reduction_frame(const LoweringGraph& graph, const LoweringNode& node) {
  ops::ReductionPlan plan = reduction_plan(node);
  const Shape& x = graph.value(node.operands[0]).type.shape;
  ReductionFrame frame;
  std::vector<int64_t> position(x.size(), -1);
  for (size_t d = 0; d < x.size(); ++d) {
    bool reduced = std::find(plan.reduced_dims.begin(), plan.reduced_dims.end(),
                             static_cast<int64_t>(d)) != plan.reduced_dims.end();
    if (!reduced) {
      position[d] = static_cast<int64_t>(frame.iteration_shape.size());
      frame.iteration_shape.push_back(x[d]);
    }
  }
  const int last = static_cast<int>(frame.iteration_shape.size());
  int64_t row = 1;
  for (int64_t d : plan.reduced_dims) row *= x[static_cast<size_t>(d)];
  frame.iteration_shape.push_back(row);
  auto inner_of = [&](int64_t d) {
    int64_t inner = 1;
    for (int64_t r : plan.reduced_dims) {
      if (r > d) inner *= x[static_cast<size_t>(r)];
    }
    return inner;
  };
  AccessMap full;
  for (size_t d = 0; d < x.size(); ++d) {
    full.dim.push_back(position[d] >= 0 ? static_cast<int>(position[d]) : last);
    full.inner.push_back(position[d] >= 0 ? 1 : inner_of(static_cast<int64_t>(d)));
  }
  AccessMap per_row = AccessMap::identity(static_cast<size_t>(last));
  AccessMap per_column;
  for (int64_t r : plan.reduced_dims) {
    per_column.dim.push_back(last);
    per_column.inner.push_back(inner_of(r));
  }
  for (size_t k = 0; k < node.operands.size(); ++k) {
    switch (plan.operand_layouts.at(k)) {
      case ops::RowLayout::kFull:
        frame.operand_maps.push_back(full);
        break;
      case ops::RowLayout::kPerRow:
        frame.operand_maps.push_back(per_row);
        break;
      case ops::RowLayout::kPerColumn:
        frame.operand_maps.push_back(per_column);
        break;
      case ops::RowLayout::kScalar:
        frame.operand_maps.push_back(AccessMap{});
        break;
    }
  }
  if (!plan.per_row_result) {
    frame.result_map = full;
  } else if (plan.mean_over_rows) {
    frame.result_map = per_row;  // the per-row values; the node's scalar comes from row_mean
  } else if (plan.keepdim) {
    for (size_t d = 0; d < x.size(); ++d) {
      frame.result_map.dim.push_back(position[d] >= 0 ? static_cast<int>(position[d]) : -1);
      frame.result_map.inner.push_back(1);
    }
  } else {
    frame.result_map = per_row;
  }
  return frame;
}

KernelAssembler::KernelAssembler(const LoweringGraph& graph, const FusionPlan& plan,
                                 const std::vector<SlotInfo>& slots,
                                 const std::map<int, int>& substitutes)
    : graph_(graph), plan_(plan), slots_(slots), substitutes_(substitutes) {}

Layout KernelAssembler::relayout_for(const Shape& shape, const AccessMap& map) {
  std::vector<size_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return map.dim[a] < map.dim[b]; });
  Layout layout{shape, Shape(shape.size(), 0), 0};
  int64_t stride = 1;
  for (size_t i = order.size(); i-- > 0;) {
    layout.strides[order[i]] = stride;
    stride *= shape[order[i]];
  }
  return layout;
}

void KernelAssembler::reset(const std::string& name, const Shape& iteration_shape) {
  spec_ = codegen::KernelSpec();
  spec_.name = name;
  spec_.iteration_shape = iteration_shape;
  result_ = AssembledKernel();
  memo_.clear();
  buffers_.clear();
  reduction_node_ = -1;
  reduction_result_ = -1;
  computed_here_.clear();
}

AssembledKernel KernelAssembler::finish() {
  spec_.verify();
  result_.spec = std::move(spec_);
  return std::move(result_);
}

int KernelAssembler::input_buffer(int slot, const Shape& strides) {
  auto key = std::make_pair(slot, strides);
  auto found = buffers_.find(key);
  if (found != buffers_.end()) return found->second;
  spec_.inputs.push_back(codegen::BufferSpec{slots_[static_cast<size_t>(slot)].dtype, strides});
  result_.input_slots.push_back(slot);
  int index = static_cast<int>(spec_.inputs.size()) - 1;
  buffers_.emplace(key, index);
  return index;
}

namespace {

// Whether the dims of `shape` that `map` sends into each iteration dim tile
// it exactly: sorted by inner, the first has inner 1, each next one the
// previous inner times its size, up to the iteration dim's size (dims of
// size 1 and broadcast dims aside). Then the iteration index there is
// sum of coord_j * inner_j over those dims (Note [Row-major index through
// merged dims]); a value broadcast over some merged dims does not tile.
bool tiles_iteration_dims(const Shape& shape, const AccessMap& map, const Shape& iteration_shape) {
  std::map<int, std::vector<size_t>> dims_of;
  for (size_t j = 0; j < shape.size(); ++j) {
    if (shape[j] != 1 && map.dim[j] >= 0) dims_of[map.dim[j]].push_back(j);
  }
  for (auto& [dim, dims] : dims_of) {
    std::sort(dims.begin(), dims.end(),
              [&](size_t a, size_t b) { return map.inner[a] < map.inner[b]; });
    int64_t tiled = 1;
    for (size_t j : dims) {
      if (map.inner[j] != tiled) return false;
      tiled *= shape[j];
    }
    if (tiled != iteration_shape[static_cast<size_t>(dim)]) return false;
  }
  return true;
}

}  // namespace

int KernelAssembler::leaf(int value, const AccessMap& map) {
  auto substitute = substitutes_.find(value);
  int slot = substitute == substitutes_.end() ? value : substitute->second;
  const SlotInfo& info = slots_[static_cast<size_t>(slot)];
  std::optional<Shape> strides =
      iteration_strides(info.layout.shape, info.layout.strides, map, spec_.iteration_shape.size());
  if (!strides) throw NeedsRelayout{value, map};
  // Read through a merged dim it does not span, the value would be read out
  // of its bounds: fusion keeps such reads out of reductions (Note
  // [Reductions read what they can index]); refuse any that slips through.
  GROVE_CHECK(tiles_iteration_dims(info.layout.shape, map, spec_.iteration_shape),
              "lowering: kernel '", spec_.name, "' would read '", info.name,
              "' broadcast across merged reduction dims, which grove cannot fuse yet (a grove "
              "bug; please report it)");
  codegen::KernelBuilder emitter(spec_);
  codegen::Expr load;
  load.op = ExprOp::kLoad;
  load.dtype = ops::compute_dtype(info.dtype);
  load.input = input_buffer(slot, *strides);
  return emitter.add(load);
}

int KernelAssembler::coordinate(const AccessMap& map, size_t value_dim, int64_t size) {
  codegen::KernelBuilder emitter(spec_);
  int dim = map.dim[value_dim];
  if (dim < 0 || size == 1) return emitter.constant(0, DType::kI64);
  // The index along `dim` is this dim's coordinate only when no other dim is
  // merged into it (Note [Row-major index through merged dims]).
  GROVE_CHECK(map.inner[value_dim] == 1 && spec_.iteration_shape[static_cast<size_t>(dim)] == size,
              "lowering: kernel '", spec_.name,
              "' needs the coordinate of a merged dimension (a grove bug; please report it)");
  return emitter.index(dim);
}

// Note [Row-major index through merged dims]: dropout's counter is its value's
// row-major index, sum over dims j of coord_j * stride_j. In a reduction
// kernel the value's reduced dims share one iteration dim whose index is
// c = sum of coord_j * inner_j over them (Note [Merged reduction dims]), and
// kernels have no integer division to split c. When the dims of one
// iteration dim tile it exactly (by increasing inner: 1, then each the
// previous inner times its size, up to the iteration dim's size) and their
// strides are S * inner_j for one S, their part of the index is c * S.
// Otherwise the coordinates are needed, which is reported as a grove bug.
// Test: SimGradientCheck.*/dropout_of_broadcast_scalar (the fuzzer's seed 1181).
int KernelAssembler::row_major_index(const AccessMap& map, const Shape& shape) {
  codegen::KernelBuilder emitter(spec_);
  const Shape strides = runtime::contiguous_strides(shape);
  std::map<int, std::vector<size_t>> dims_of;  // iteration dim -> value dims
  for (size_t j = 0; j < shape.size(); ++j) {
    if (shape[j] != 1 && map.dim[j] >= 0) dims_of[map.dim[j]].push_back(j);
  }
  int index = emitter.constant(0, DType::kI64);
  for (auto& [dim, dims] : dims_of) {
    std::sort(dims.begin(), dims.end(),
              [&](size_t a, size_t b) { return map.inner[a] < map.inner[b]; });
    const int64_t scale = strides[dims[0]];
    bool exact = tiles_iteration_dims(shape, map, spec_.iteration_shape);
    for (size_t j : dims) exact = exact && strides[j] == scale * map.inner[j];
    GROVE_CHECK(exact, "lowering: kernel '", spec_.name,
                "' needs the coordinate of a merged dimension (a grove bug; please report it)");
    index =
        emitter.binary(ExprOp::kAdd, index,
                       emitter.binary(ExprOp::kMul, emitter.index(dim),
                                      emitter.constant(static_cast<double>(scale), DType::kI64)));
  }
  return index;
}

int KernelAssembler::value_expr(int value, const AccessMap& map) {
  auto key = std::make_pair(value, map);
  auto found = memo_.find(key);
  if (found != memo_.end()) return found->second;
  int expr = -1;
  if (!plan_.inlined[static_cast<size_t>(value)] &&
      std::find(computed_here_.begin(), computed_here_.end(), value) == computed_here_.end()) {
    expr = leaf(value, map);
  } else {
    int producer = graph_.value(value).producer;
    if (graph_.node(producer).node_class == NodeClass::kReduction) {
      expr = reduction_expr(producer);
    } else {
      expr = pointwise_expr(producer, map, nullptr);
    }
  }
  memo_.emplace(key, expr);
  return expr;
}

int KernelAssembler::reduction_expr(int node_index) {
  if (reduction_node_ == node_index && reduction_result_ >= 0) return reduction_result_;
  const LoweringNode& node = graph_.node(node_index);
  ReductionFrame frame = reduction_frame(graph_, node);
  std::vector<int> operands;
  for (size_t k = 0; k < node.operands.size(); ++k) {
    operands.push_back(value_expr(node.operands[k], frame.operand_maps[k]));
  }
  codegen::KernelBuilder emitter(spec_);
  int expr = node.def->reduction_expr(emitter, operands, node.context);
  reduction_node_ = node_index;
  reduction_result_ = expr;
  return expr;
}

int KernelAssembler::pointwise_expr(int node_index, const AccessMap& map,
                                    std::vector<int>* all_results) {
  const LoweringNode& node = graph_.node(node_index);
  const Shape& shape = graph_.value(node.results[0]).type.shape;
  codegen::KernelBuilder emitter(spec_);
  auto operand = [&](size_t k) {
    const Shape& operand_shape = graph_.value(node.operands[k]).type.shape;
    return value_expr(node.operands[k], compose(map, broadcast_map(operand_shape, shape)));
  };
  std::vector<int> results;
  switch (node.pointwise) {
    case PointwiseKind::kHook: {
      std::vector<int> operands;
      for (size_t k = 0; k < node.operands.size(); ++k) operands.push_back(operand(k));
      results = node.def->elementwise_expr(emitter, operands, node.context);
      break;
    }
    case PointwiseKind::kEmbedding: {
      // rows of table[V, D] picked by ids[...]: result[..., d] = table[ids[...], d].
      const SlotInfo& table = slots_[static_cast<size_t>(node.operands[0])];
      const int64_t vocab = table.layout.shape[0];
      AccessMap ids_map;
      for (size_t j = 0; j + 1 < shape.size(); ++j) {
        ids_map.dim.push_back(static_cast<int>(j));
        ids_map.inner.push_back(1);
      }
      int id = emitter.cast(value_expr(node.operands[1], compose(map, ids_map)), DType::kI64);
      // Ids outside [0, V) are clamped: a kernel cannot raise an error.
      id = emitter.binary(ExprOp::kMax, id, emitter.constant(0, DType::kI64));
      id = emitter.binary(ExprOp::kMin, id,
                          emitter.constant(static_cast<double>(vocab - 1), DType::kI64));
      int column = coordinate(map, shape.size() - 1, shape.back());
      int at = emitter.binary(
          ExprOp::kAdd,
          emitter.binary(
              ExprOp::kMul, id,
              emitter.constant(static_cast<double>(table.layout.strides[0]), DType::kI64)),
          emitter.binary(
              ExprOp::kMul, column,
              emitter.constant(static_cast<double>(table.layout.strides[1]), DType::kI64)));
      int buffer = input_buffer(node.operands[0], Shape(spec_.iteration_shape.size(), 0));
      codegen::Expr load;
      load.op = ExprOp::kLoadAt;
      load.dtype = ops::compute_dtype(table.dtype);
      load.input = buffer;
      load.operands = {at};
      results = {emitter.add(load)};
      break;
    }
    case PointwiseKind::kDropout: {
      // Note [Dropout randomness] (ops/philox.h): counter = offset + row-major index.
      double p = node.context.attrs.get_float("p");
      int x = operand(0);
      int seed = emitter.cast(operand(1), DType::kI64);
      int offset = emitter.cast(operand(2), DType::kI64);
      int linear = row_major_index(map, shape);
      codegen::Expr draw;
      draw.op = ExprOp::kPhilox;
      draw.dtype = DType::kF32;
      draw.operands = {seed, emitter.binary(ExprOp::kAdd, offset, linear)};
      int uniform = emitter.add(draw);
      int keep = emitter.binary(ExprOp::kGe, uniform, emitter.constant(p));
      int scaled = emitter.binary(ExprOp::kMul, x, emitter.constant(1.0 / (1.0 - p)));
      results = {emitter.where(keep, scaled, emitter.constant(0))};
      break;
    }
  }
  GROVE_CHECK(results.size() == node.results.size(), "lowering: the lowering hook of node '",
              node.name, "' (", node.op, ") returned ", results.size(), " exprs for ",
              node.results.size(), " results");
  for (size_t r = 0; r < results.size(); ++r) {
    DType wanted = ops::compute_dtype(graph_.value(node.results[r]).type.dtype);
    results[r] = emitter.cast(results[r], wanted);
  }
  if (all_results != nullptr) *all_results = results;
  return results[0];
}

void KernelAssembler::add_output(int expr, int slot, const AccessMap& map, int64_t offset) {
  const SlotInfo& info = slots_[static_cast<size_t>(slot)];
  const size_t rank = spec_.iteration_shape.size();
  std::optional<Shape> strides =
      iteration_strides(info.layout.shape, info.layout.strides, map, rank);
  GROVE_CHECK(strides.has_value(), "lowering: kernel '", spec_.name, "' cannot write '", info.name,
              "' through its layout (a grove bug; please report it)");
  bool per_row = false;
  if (!spec_.reductions.empty() && rank > 0) {
    per_row =
        std::find(map.dim.begin(), map.dim.end(), static_cast<int>(rank) - 1) == map.dim.end();
  }
  if (per_row) strides->pop_back();
  spec_.outputs.push_back(codegen::OutputSpec{info.dtype, expr, per_row, *strides});
  result_.output_slots.push_back(slot);
  result_.output_offsets.push_back(offset);
}

namespace {

std::string group_name(const LoweringGraph& graph, const std::vector<int>& members) {
  std::string name;
  size_t shown = 0;
  for (int member : members) {
    const std::string& op = graph.node(member).op;
    if (graph.node(member).operands.empty() && members.size() > 1) continue;  // constants
    if (shown == 4) {
      name += "_etc";
      break;
    }
    name += (name.empty() ? "" : "_") + op;
    ++shown;
  }
  return name.empty() ? "kernel" : name;
}

}  // namespace

AssembledKernel KernelAssembler::group(int root, int row_values_slot) {
  const LoweringNode& node = graph_.node(root);
  const int reduction = plan_.reduction[static_cast<size_t>(root)];
  const std::vector<int>& members = plan_.members[static_cast<size_t>(root)];
  AccessMap root_map;
  if (reduction >= 0) {
    const LoweringNode& reduced = graph_.node(reduction);
    ReductionFrame frame = reduction_frame(graph_, reduced);
    reset(group_name(graph_, members), frame.iteration_shape);
    root_map = frame.result_map;
    const Shape& root_shape = graph_.value(node.results[0]).type.shape;
    if (node.node_class == NodeClass::kPointwise &&
        root_shape == graph_.value(reduced.operands[0]).type.shape &&
        root_shape != graph_.value(reduced.results[0]).type.shape) {
      // Note [Per-row values broadcast in their reduction's kernel] (fusion.cc):
      // the root has the row operand's shape and is written per element.
      root_map = frame.operand_maps[0];
    }
  } else {
    const Shape& shape = graph_.value(node.results[0]).type.shape;
    reset(group_name(graph_, members), shape);
    root_map = AccessMap::identity(shape.size());
  }
  if (node.node_class == NodeClass::kReduction) {
    // Note [Reduction prologues]: extra outputs are the row operand, written per element.
    computed_here_ = plan_.extra_outputs[static_cast<size_t>(root)];
    int expr = reduction_expr(root);
    int slot = row_values_slot >= 0 ? row_values_slot : node.results[0];
    add_output(expr, slot, root_map, 0);
    if (!computed_here_.empty()) {
      const AccessMap row_map = reduction_frame(graph_, node).operand_maps[0];
      for (int value : computed_here_) add_output(value_expr(value, row_map), value, row_map, 0);
    }
    spec_.thread_rows = use_thread_rows(graph_, node, spec_);
    return finish();
  }
  // Note [Reduction prologues] under a pointwise root: the values this kernel
  // computes and writes, per element of its rows (the root's own map).
  computed_here_ = plan_.extra_outputs[static_cast<size_t>(root)];
  std::vector<int> results;
  pointwise_expr(root, root_map, &results);
  for (size_t r = 0; r < results.size(); ++r) {
    int target = node.in_place_operand[r] >= 0
                     ? node.operands[static_cast<size_t>(node.in_place_operand[r])]
                     : node.results[r];
    add_output(results[r], target, root_map, 0);
  }
  for (int value : computed_here_) add_output(value_expr(value, root_map), value, root_map, 0);
  return finish();
}

AssembledKernel KernelAssembler::copy(int source, int destination, const std::string& name) {
  const SlotInfo& from = slots_[static_cast<size_t>(source)];
  reset(name, from.layout.shape);
  AccessMap map = AccessMap::identity(from.layout.shape.size());
  codegen::KernelBuilder emitter(spec_);
  codegen::Expr load;
  load.op = ExprOp::kLoad;
  load.dtype = ops::compute_dtype(from.dtype);
  load.input = input_buffer(source, from.layout.strides);
  int expr = emitter.add(load);
  add_output(expr, destination, map, 0);
  return finish();
}

// Note [Concat parts compute their operand]: an operand that fusion inlined
// into the concat (a pointwise value nothing else reads: rotate_half's
// negated half) is computed here from its own operands instead of loaded, so
// it costs no kernel of its own. Test: OpLowering's gather case (an exp
// inside a concat) and Concat.NegatedHalfCostsNoKernel.
AssembledKernel KernelAssembler::concat_part(int source, int destination, int64_t element_offset) {
  const SlotInfo& from = slots_[static_cast<size_t>(source)];
  const SlotInfo& to = slots_[static_cast<size_t>(destination)];
  reset("concat", from.layout.shape);
  int expr = -1;
  if (plan_.inlined[static_cast<size_t>(source)]) {
    expr = value_expr(source, AccessMap::identity(from.layout.shape.size()));
  } else {
    codegen::KernelBuilder emitter(spec_);
    codegen::Expr load;
    load.op = ExprOp::kLoad;
    load.dtype = ops::compute_dtype(from.dtype);
    load.input = input_buffer(source, from.layout.strides);
    expr = emitter.add(load);
  }
  // The part covers a box of the destination with the destination's strides.
  spec_.outputs.push_back(codegen::OutputSpec{to.dtype, expr, false, to.layout.strides});
  result_.output_slots.push_back(destination);
  result_.output_offsets.push_back(element_offset);
  return finish();
}

// Note [One kernel for a concat of equal parts]: a concat whose operands all
// have one shape S (rotate_half's halves, a rotary table's cat(freqs, freqs))
// is one kernel over [parts, S...] instead of one per part: element (p, c) is
// part p at c, picked from every part's value at c by a chain of wheres on p,
// and written at c plus p parts into the destination (the part dim's stride
// is the part's extent along the concat dim). Each part is loaded or, when
// fusion inlined it (Note [Concat parts compute their operand]), computed,
// exactly as its own part kernel would, so results are bitwise those of the
// part kernels; every element reads each part once, so the scheduler keeps
// this for concats of at most kMaxConcatParts parts. Test:
// Concat.NegatedHalfCostsNoKernel and Concat.EqualPartsAreOneKernel
// (tests/compiler/lowering/ops_lowering_test.cc).
AssembledKernel KernelAssembler::concat_of_equal_parts(const std::vector<int>& sources,
                                                       int destination, int64_t part_stride) {
  const Shape& shape = slots_[static_cast<size_t>(sources[0])].layout.shape;
  const SlotInfo& to = slots_[static_cast<size_t>(destination)];
  Shape iteration = {static_cast<int64_t>(sources.size())};
  iteration.insert(iteration.end(), shape.begin(), shape.end());
  reset("concat", iteration);
  AccessMap part_map;  // a part's dim j is iteration dim j + 1
  for (size_t j = 0; j < shape.size(); ++j) {
    part_map.dim.push_back(static_cast<int>(j) + 1);
    part_map.inner.push_back(1);
  }
  std::vector<int> values;
  for (int source : sources) values.push_back(value_expr(source, part_map));
  codegen::KernelBuilder emitter(spec_);
  const int part = emitter.index(0);
  int expr = values.back();
  for (size_t p = values.size() - 1; p-- > 0;) {
    const int here = emitter.binary(ExprOp::kLt, part,
                                    emitter.constant(static_cast<double>(p + 1), DType::kI64));
    expr = emitter.where(here, values[p], expr);
  }
  Shape strides = {part_stride};
  strides.insert(strides.end(), to.layout.strides.begin(), to.layout.strides.end());
  spec_.outputs.push_back(codegen::OutputSpec{to.dtype, expr, false, strides});
  result_.output_slots.push_back(destination);
  result_.output_offsets.push_back(0);
  return finish();
}

AssembledKernel KernelAssembler::row_mean(int row_values, int destination, int64_t rows) {
  reset("row_mean", {rows});
  codegen::KernelBuilder emitter(spec_);
  codegen::Expr load;
  load.op = ExprOp::kLoad;
  load.dtype = DType::kF32;
  load.input = input_buffer(row_values, {1});
  int total = emitter.reduce_value(codegen::ReduceOp::kSum, emitter.add(load));
  int mean = emitter.binary(ExprOp::kDiv, total, emitter.constant(static_cast<double>(rows)));
  const SlotInfo& to = slots_[static_cast<size_t>(destination)];
  spec_.outputs.push_back(codegen::OutputSpec{to.dtype, mean, true, {}});
  result_.output_slots.push_back(destination);
  result_.output_offsets.push_back(0);
  return finish();
}

}  // namespace grove::compiler::lowering
