#include "compiler/lowering/attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/codegen/kernel_builder.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {
namespace {

using codegen::ExprOp;
using codegen::ReduceOp;
using runtime::DType;
using runtime::Shape;

// Where the iteration dims of the kernel sit (Note [Fused attention kernel]):
// the leading dims, then key head, query head within its group, query
// position, feature chunk and key position.
struct Dims {
  size_t leading = 0;
  size_t key_head() const { return leading; }
  size_t group() const { return leading + 1; }
  size_t query() const { return leading + 2; }
  size_t chunk() const { return leading + 3; }
  size_t key() const { return leading + 4; }
  size_t rank() const { return leading + 5; }
};

// An operand's element strides over the iteration space, from its strides
// along [leading..., heads, query, key] (`head_in_group`: whether the head
// stride steps with the query head within its group, as query's and the
// mask's do, or only with the key head, as key's and value's do).
Shape iteration_strides(const Dims& dims, const Shape& leading, int64_t head, int64_t group,
                        bool head_in_group, int64_t query, int64_t chunk, int64_t key) {
  Shape strides(dims.rank(), 0);
  for (size_t d = 0; d < dims.leading; ++d) strides[d] = leading[d];
  strides[dims.key_head()] = head_in_group ? head * group : head;
  strides[dims.group()] = head_in_group ? head : 0;
  strides[dims.query()] = query;
  strides[dims.chunk()] = chunk;
  strides[dims.key()] = key;
  return strides;
}

// Independent partial sums of a score's dot product.
constexpr int64_t kScoreChains = 4;

}  // namespace

int64_t attention_features_per_row(int64_t value_features, int64_t query_rows) {
  const int64_t most =
      query_rows >= kAttentionRowsForWideRows ? kAttentionMaxFeaturesPerRow : int64_t{32};
  for (int64_t features = std::min(value_features, most); features > 1; --features) {
    if (value_features % features == 0) return features;
  }
  return 1;
}

AssembledKernel attention_kernel(const LoweringNode& node, const std::vector<SlotInfo>& slots) {
  GROVE_CHECK(node.operands.size() >= 3 && node.results.size() == 1, "attention kernel: node '",
              node.name, "' needs query, key, value (and maybe a mask) and one result");
  auto slot = [&](int value) -> const SlotInfo& { return slots.at(static_cast<size_t>(value)); };
  const SlotInfo& query = slot(node.operands[0]);
  const SlotInfo& key = slot(node.operands[1]);
  const SlotInfo& value = slot(node.operands[2]);
  const SlotInfo& result = slot(node.results[0]);
  const Layout& q = query.layout;
  const Layout& k = key.layout;
  const Layout& v = value.layout;
  const Layout& out = result.layout;
  const size_t rank = q.shape.size();
  Dims dims;
  dims.leading = rank - 3;
  const int64_t key_heads = k.shape[rank - 3];
  const int64_t group = q.shape[rank - 3] / key_heads;
  const int64_t queries = q.shape[rank - 2], features = q.shape[rank - 1];
  const int64_t keys = k.shape[rank - 2], value_features = v.shape[rank - 1];
  const int64_t per_row =
      attention_features_per_row(value_features, runtime::shape_numel(q.shape) / features);

  Shape iteration(dims.rank(), 1);
  for (size_t d = 0; d < dims.leading; ++d) iteration[d] = q.shape[d];
  iteration[dims.key_head()] = key_heads;
  iteration[dims.group()] = group;
  iteration[dims.query()] = queries;
  iteration[dims.chunk()] = value_features / per_row;
  iteration[dims.key()] = keys;
  codegen::KernelBuilder b("fused_attention", iteration);
  AssembledKernel kernel;

  auto i64 = [&](int64_t number) { return b.constant(static_cast<double>(number), DType::kI64); };
  // The element offset of an operand at the kernel's place: sum of index * stride.
  auto offset = [&](const Shape& strides) {
    int total = -1;
    for (size_t d = 0; d < strides.size(); ++d) {
      if (strides[d] == 0 || iteration[d] == 1) continue;
      const int term = strides[d] == 1
                           ? b.index(static_cast<int>(d))
                           : b.binary(ExprOp::kMul, b.index(static_cast<int>(d)), i64(strides[d]));
      total = total < 0 ? term : b.binary(ExprOp::kAdd, total, term);
    }
    return total < 0 ? i64(0) : total;
  };
  auto at = [&](int base, int64_t step) {
    return step == 0 ? base : b.binary(ExprOp::kAdd, base, i64(step));
  };
  auto leading = [&](const Layout& layout) {
    return Shape(layout.strides.begin(),
                 layout.strides.begin() + static_cast<int64_t>(dims.leading));
  };

  // Inputs read through load_at at offsets computed from their layouts.
  const int q_input = b.input(query.dtype, Shape(dims.rank(), 0));
  kernel.input_slots.push_back(node.operands[0]);
  const int k_input = b.input(key.dtype, Shape(dims.rank(), 0));
  kernel.input_slots.push_back(node.operands[1]);
  const int v_input = b.input(value.dtype, Shape(dims.rank(), 0));
  kernel.input_slots.push_back(node.operands[2]);

  const int q_base = offset(iteration_strides(dims, leading(q), q.strides[rank - 3], group, true,
                                              q.strides[rank - 2], 0, 0));
  const int k_base = offset(iteration_strides(dims, leading(k), k.strides[rank - 3], group, false,
                                              0, 0, k.strides[rank - 2]));
  // The dot product in kScoreChains interleaved partial sums (feature d goes
  // to chain d % kScoreChains), added together at the end: four independent
  // add chains instead of one that waits on every add.
  std::vector<int> chains;
  for (int64_t d = 0; d < features; ++d) {
    const int product =
        b.binary(ExprOp::kMul, b.load_at(q_input, at(q_base, d * q.strides[rank - 1])),
                 b.load_at(k_input, at(k_base, d * k.strides[rank - 1])));
    const auto chain = static_cast<size_t>(d % kScoreChains);
    if (chain == chains.size()) {
      chains.push_back(product);
    } else {
      chains[chain] = b.binary(ExprOp::kAdd, chains[chain], product);
    }
  }
  int score = chains[0];
  for (size_t chain = 1; chain < chains.size(); ++chain) {
    score = b.binary(ExprOp::kAdd, score, chains[chain]);
  }
  score =
      b.binary(ExprOp::kMul, score, b.constant(node.context.attrs.get_float("scale"), DType::kF32));
  const int minus_infinity = b.constant(-std::numeric_limits<double>::infinity(), DType::kF32);
  if (node.operands.size() == 4) {
    const SlotInfo& mask = slot(node.operands[3]);
    // The mask's strides along [leading..., heads, query, key], broadcast from the right.
    Shape aligned(rank, 0);
    const size_t pad = rank - mask.layout.shape.size();
    for (size_t d = 0; d < mask.layout.shape.size(); ++d) {
      if (mask.layout.shape[d] != 1) aligned[pad + d] = mask.layout.strides[d];
    }
    const int mask_input = b.input(
        mask.dtype,
        iteration_strides(
            dims, Shape(aligned.begin(), aligned.begin() + static_cast<int64_t>(dims.leading)),
            aligned[rank - 3], group, true, aligned[rank - 2], 0, aligned[rank - 1]));
    kernel.input_slots.push_back(node.operands[3]);
    if (mask.dtype == DType::kBool) {
      score = b.where(b.load(mask_input, DType::kBool), score, minus_infinity);
    } else {
      score = b.binary(ExprOp::kAdd, score, b.load(mask_input));
    }
  }
  if (node.context.attrs.get_int("causal") != 0) {
    score = b.where(b.binary(ExprOp::kLe, b.index(static_cast<int>(dims.key())),
                             b.index(static_cast<int>(dims.query()))),
                    score, minus_infinity);
  }

  const int zero = b.constant(0.0, DType::kF32);
  const int row_max = b.reduce_value(ReduceOp::kMax, score);
  // Every score -inf: m = 0, so each exp is 0 and the row writes zeros.
  const int shift = b.where(b.binary(ExprOp::kEq, row_max, minus_infinity), zero, row_max);
  const int weight = b.unary(ExprOp::kExp, b.binary(ExprOp::kSub, score, shift));
  const int total = b.reduce(ReduceOp::kSum, weight);
  const int v_base =
      offset(iteration_strides(dims, leading(v), v.strides[rank - 3], group, false, 0,
                               per_row * v.strides[rank - 1], v.strides[rank - 2]));
  std::vector<int> sums;
  for (int64_t f = 0; f < per_row; ++f) {
    sums.push_back(b.reduce(
        ReduceOp::kSum,
        b.binary(ExprOp::kMul, weight, b.load_at(v_input, at(v_base, f * v.strides[rank - 1])))));
  }
  const int denominator = b.reduced(total);
  const int positive = b.binary(ExprOp::kGt, denominator, zero);
  Shape row_strides = iteration_strides(dims, leading(out), out.strides[rank - 3], group, true,
                                        out.strides[rank - 2], per_row * out.strides[rank - 1], 0);
  row_strides.pop_back();
  for (int64_t f = 0; f < per_row; ++f) {
    const int mixed = b.binary(ExprOp::kDiv, b.reduced(sums[static_cast<size_t>(f)]), denominator);
    b.output(b.where(positive, mixed, zero), result.dtype, row_strides, /*per_row=*/true);
    kernel.output_slots.push_back(node.results[0]);
    kernel.output_offsets.push_back(f * out.strides[rank - 1]);
  }
  b.spec().warp_rows = true;
  kernel.spec = b.build();
  return kernel;
}

Layout positions_major_layout(const Shape& shape) {
  const size_t rank = shape.size();
  Layout layout;
  layout.shape = shape;
  layout.strides.assign(rank, 0);
  layout.strides[rank - 2] = 1;
  layout.strides[rank - 1] = shape[rank - 2];
  int64_t step = shape[rank - 2] * shape[rank - 1];
  for (size_t d = rank - 2; d-- > 0;) {
    layout.strides[d] = step;
    step *= shape[d];
  }
  return layout;
}

bool positions_major(const Layout& layout) {
  const size_t rank = layout.shape.size();
  return rank >= 2 && (layout.strides[rank - 2] == 1 || layout.shape[rank - 2] == 1);
}

std::vector<AssembledKernel> positions_major_copies(const std::vector<SlotInfo>& slots,
                                                    const std::vector<int>& sources,
                                                    const std::vector<int>& copies) {
  GROVE_CHECK(sources.size() == copies.size(), "attention: ", sources.size(), " sources for ",
              copies.size(), " copies (a grove bug; please report it)");
  auto slot = [&](int index) -> const SlotInfo& { return slots.at(static_cast<size_t>(index)); };
  // Strides over the iteration space [..., features, positions] of a layout
  // of [..., positions, features].
  auto features_first = [](const Shape& strides) {
    Shape swapped = strides;
    std::swap(swapped[swapped.size() - 2], swapped[swapped.size() - 1]);
    return swapped;
  };
  std::vector<AssembledKernel> kernels;
  std::vector<bool> done(sources.size(), false);
  for (size_t first = 0; first < sources.size(); ++first) {
    if (done[first]) continue;
    const Shape& shape = slot(sources[first]).layout.shape;
    Shape iteration = features_first(shape);
    codegen::KernelBuilder b("positions_major_copy", iteration);
    AssembledKernel kernel;
    for (size_t pair = first; pair < sources.size(); ++pair) {
      if (done[pair] || slot(sources[pair]).layout.shape != shape) continue;
      done[pair] = true;
      const SlotInfo& from = slot(sources[pair]);
      const SlotInfo& to = slot(copies[pair]);
      const int input = b.input(from.dtype, features_first(from.layout.strides));
      kernel.input_slots.push_back(sources[pair]);
      b.output(b.load(input), to.dtype, features_first(to.layout.strides));
      kernel.output_slots.push_back(copies[pair]);
      kernel.output_offsets.push_back(0);
    }
    kernel.spec = b.build();
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

// Note [Attention results with heads last]: the heads of an attention's
// result [..., H, T, Dv] are almost always merged back right away (a
// transpose or permute, then a reshape to [..., T, H * Dv]), which for a
// contiguous result is a copy kernel. When every reader of the result is
// one same transpose or permute (and the result is no program output), the
// kernel writes the result in the layout that makes that view contiguous, so
// the reshape after it is a view too. The written-out attention's last
// matmul gets the same layout (matmul_result_layout) where its GEMM writes it
// in one strided batch: at batch 1 (the batch dims of size > 1 are the heads
// alone), not across batches (B launches instead of one GEMM and a copy).
// Tests: AttentionKernel.HeadsMergedBackCostNoCopy and
// Matmul.HeadsMergedBackCostNoCopyAtBatchOne (tests/compiler/lowering/ops_lowering_test.cc).
namespace {

// The order (result dim i is operand dim order[i]) of a transpose or permute
// node, or empty for any other node.
std::vector<int64_t> view_order(const LoweringNode& reader, int64_t rank) {
  std::vector<int64_t> order;
  if (reader.op == "permute") {
    for (int64_t dim : reader.context.attrs.get_ints("order"))
      order.push_back(dim < 0 ? dim + rank : dim);
  } else if (reader.op == "transpose") {
    for (int64_t d = 0; d < rank; ++d) order.push_back(d);
    int64_t first = reader.context.attrs.get_int("dim0");
    int64_t second = reader.context.attrs.get_int("dim1");
    first = first < 0 ? first + rank : first;
    second = second < 0 ? second + rank : second;
    if (first < 0 || first >= rank || second < 0 || second >= rank) return {};
    std::swap(order[static_cast<size_t>(first)], order[static_cast<size_t>(second)]);
  }
  return order;
}

}  // namespace

namespace {

// Note [Attention results with heads last] for value `result`: the layout
// that makes its readers' one transpose or permute contiguous, or nullopt.
std::optional<Layout> heads_last_layout(const LoweringGraph& graph, int result) {
  const LoweringValue& value = graph.value(result);
  const auto& uses = graph.uses()[static_cast<size_t>(result)];
  const Shape& shape = value.type.shape;
  const auto rank = static_cast<int64_t>(shape.size());
  if (value.is_output || value.dynamic() || uses.empty()) return std::nullopt;
  std::vector<int64_t> order;
  for (const auto& [consumer, position] : uses) {
    std::vector<int64_t> read = view_order(graph.node(consumer), rank);
    if (read.size() != shape.size() || (!order.empty() && read != order)) return std::nullopt;
    order = std::move(read);
  }
  // The readers' view, contiguous: operand dim order[i] steps as dim i of it.
  Shape viewed(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) viewed[i] = shape[static_cast<size_t>(order[i])];
  const Shape viewed_strides = runtime::contiguous_strides(viewed);
  Layout layout;
  layout.shape = shape;
  layout.strides.assign(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    layout.strides[static_cast<size_t>(order[i])] = viewed_strides[i];
  }
  if (layout.is_contiguous()) return std::nullopt;
  return layout;
}

// `shape` without its dims of size 1.
Shape without_unit_dims(const Shape& shape) {
  Shape kept;
  for (int64_t size : shape) {
    if (size != 1) kept.push_back(size);
  }
  return kept;
}

}  // namespace

std::optional<Layout> transposed_reshape_layout(const LoweringGraph& graph, int value) {
  const auto& uses = graph.uses()[static_cast<size_t>(value)];
  const LoweringValue& produced = graph.value(value);
  if (uses.size() != 1 || produced.is_output || produced.dynamic()) return std::nullopt;
  const LoweringNode& view = graph.node(uses[0].first);
  const auto rank = static_cast<int64_t>(produced.type.shape.size());
  const std::vector<int64_t> order = view_order(view, rank);
  if (order.size() != produced.type.shape.size() || view.results.size() != 1) return std::nullopt;
  const int viewed = view.results[0];
  const auto& readers = graph.uses()[static_cast<size_t>(viewed)];
  if (graph.value(viewed).is_output || readers.empty()) return std::nullopt;
  // The transpose of the contiguous result, as the reshapes would see it.
  const Shape contiguous = runtime::contiguous_strides(produced.type.shape);
  Shape shape(order.size()), strides(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    shape[i] = produced.type.shape[static_cast<size_t>(order[i])];
    strides[i] = contiguous[static_cast<size_t>(order[i])];
  }
  bool copies = false;
  for (const auto& [reader, position] : readers) {
    const LoweringNode& reshape = graph.node(reader);
    if (reshape.op != "reshape" || reshape.results.size() != 1) return std::nullopt;
    copies |= !view_strides(shape, strides, graph.value(reshape.results[0]).type.shape);
  }
  if (!copies) return std::nullopt;
  return heads_last_layout(graph, value);
}

std::optional<Layout> attention_result_layout(const LoweringGraph& graph, int node_index) {
  return heads_last_layout(graph, graph.node(node_index).results.at(0));
}

std::optional<Layout> matmul_result_layout(const LoweringGraph& graph, int node_index) {
  const LoweringNode& node = graph.node(node_index);
  if (node.op != "matmul" || node.transpose_b || node.epilogue != runtime::GemmEpilogue::kNone ||
      node.results.size() != 1) {
    return std::nullopt;
  }
  const int result = node.results[0];
  const LoweringValue& value = graph.value(result);
  const Shape& shape = value.type.shape;
  if (shape.size() < 3 || value.is_output || value.dynamic()) return std::nullopt;
  std::optional<Layout> layout = heads_last_layout(graph, result);
  const auto& uses = graph.uses()[static_cast<size_t>(result)];
  if (!layout && uses.size() == 1) {
    // bmm's [B*H, T, D] read as [B, H, T, D] by a reshape that only adds or
    // drops dims of size 1 (B = 1): the layout that reshape's readers want,
    // without those dims.
    const LoweringNode& reshape = graph.node(uses[0].first);
    const int viewed = reshape.results.empty() ? -1 : reshape.results[0];
    if (reshape.op == "reshape" && viewed >= 0 && !graph.value(viewed).is_output &&
        without_unit_dims(graph.value(viewed).type.shape) == without_unit_dims(shape)) {
      if (std::optional<Layout> wanted = heads_last_layout(graph, viewed)) {
        std::optional<Shape> strides = view_strides(wanted->shape, wanted->strides, shape);
        if (strides) layout = Layout{shape, *strides, 0};
      }
    }
  }
  if (!layout || layout->strides.back() != 1 || layout->strides[shape.size() - 2] < shape.back()) {
    return std::nullopt;
  }
  // The batch dims of size > 1 must stay one strided batch (one GEMM call).
  int64_t inner_stride = -1, inner_size = 1;
  for (size_t d = shape.size() - 2; d-- > 0;) {
    if (shape[d] == 1) continue;
    if (inner_stride >= 0 && layout->strides[d] != inner_stride * inner_size) return std::nullopt;
    inner_stride = layout->strides[d];
    inner_size = shape[d];
  }
  return layout;
}

}  // namespace grove::compiler::lowering
