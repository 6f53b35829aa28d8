#include "compiler/lowering/lowering_graph.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "compiler/lowering/small_m_gemm.h"
#include "compiler/lowering/tiny_k_gemm.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {

bool LoweringNode::in_place() const {
  for (int operand : in_place_operand) {
    if (operand >= 0) return true;
  }
  return false;
}

namespace {

NodeClass classify(const ops::OpDef& def) {
  switch (def.kind) {
    case ops::OpKind::kElementwise:
    case ops::OpKind::kCopyUpdate:
    case ops::OpKind::kRandom:
      return NodeClass::kPointwise;
    case ops::OpKind::kReduction:
      return NodeClass::kReduction;
    case ops::OpKind::kView:
      return NodeClass::kView;
    case ops::OpKind::kMatmul:
      return NodeClass::kGemm;
    case ops::OpKind::kGather:
      return def.name == "embedding" ? NodeClass::kPointwise : NodeClass::kConcat;
    case ops::OpKind::kSpecial:
      return NodeClass::kHost;
    case ops::OpKind::kAttention:
      return NodeClass::kAttention;
  }
  return NodeClass::kHost;
}

// Whether `program`'s device runs `epilogue` on GEMMs of `dtype`, as its BLAS
// says (always on sim and cpu, on cuda when the installed cuBLASLt has it); no
// epilogue runs on a device this machine lacks. `m`, `n`, `k`: the GEMM's
// row-major sizes where they matter (the bias-gradient epilogue), else a
// representative 64.
bool epilogue_runs(const ir::Program& program, runtime::GemmEpilogue epilogue, runtime::DType dtype,
                   int64_t m = 64, int64_t n = 64, int64_t k = 64) {
  const runtime::Device device = program.device();
  if (!runtime::device_available(device)) return false;
  return runtime::device_context(device).platform().blas().gemm_row_major_epilogue_available(
      epilogue, dtype, m, n, k);
}

// Note [GEMM epilogues in lowering], through a view: a linear whose result is
// read only by a reshape (a 3-d activation's rows put back: linear's [B*T, N]
// as [B, T, N]) that is read only by an `activation` (gelu or relu) of its
// type, neither the linear's nor the reshape's result a program output.
// Returns that activation's node, or null.
const ir::Node* activation_through_reshape(const ir::Program& program,
                                           const std::vector<std::vector<size_t>>& ir_users,
                                           const std::vector<bool>& ir_output,
                                           ir::ValueId linear_result, const char* activation) {
  const std::vector<size_t>& users = ir_users[static_cast<size_t>(linear_result)];
  if (users.size() != 1 || ir_output[static_cast<size_t>(linear_result)]) return nullptr;
  const ir::Node& reshape = program.nodes()[users[0]];
  if (reshape.op != "reshape" || reshape.results.size() != 1) return nullptr;
  const ir::ValueId viewed = reshape.results[0];
  const std::vector<size_t>& readers = ir_users[static_cast<size_t>(viewed)];
  if (readers.size() != 1 || ir_output[static_cast<size_t>(viewed)]) return nullptr;
  const ir::Node& gelu = program.nodes()[readers[0]];
  if (gelu.op != activation || gelu.operands.size() != 1 || gelu.results.size() != 1 ||
      program.value(gelu.results[0]).type != program.value(viewed).type) {
    return nullptr;
  }
  return &gelu;
}

// Note [GEMM auxiliary output in lowering]: the first `gelu` reading a
// linear's result whose other readers (or the program's outputs: a training
// forward saves the pre-activation for the backward) need the result too. Only
// when the feature count is a multiple of 8, as cuBLASLt's aux matrix needs.
const ir::Node* aux_gelu_user(const ir::Program& program,
                              const std::vector<std::vector<size_t>>& ir_users,
                              ir::ValueId linear_result) {
  const ir::TensorType& type = program.value(linear_result).type;
  if (type.shape.empty() || type.shape.back() % 8 != 0 ||
      !epilogue_runs(program, runtime::GemmEpilogue::kBiasGeluAux, type.dtype)) {
    return nullptr;
  }
  for (size_t user : ir_users[static_cast<size_t>(linear_result)]) {
    const ir::Node& node = program.nodes()[user];
    if (node.op == "gelu" && node.operands.size() == 1 && node.results.size() == 1 &&
        program.value(node.results[0]).type == type) {
      return &node;
    }
  }
  return nullptr;
}

// Note [GEMM auxiliary output in lowering], through a view: a linear whose
// result is read only by a reshape (its [B*T, N] rows as [B, T, N], neither a
// program output) whose result is read by a `gelu` of its type and by others
// too (a training forward saves the viewed pre-activation, as ATen graphs
// have it). The GEMM yields the gelu's result in rows of its own, which a
// reshape made here views as the gelu's type, and the pre-activation as the
// aux output in the linear's own rows, which the reshape reads. Only when the
// feature count is a multiple of 8. Returns that gelu, or null.
const ir::Node* aux_gelu_through_reshape(const ir::Program& program,
                                         const std::vector<std::vector<size_t>>& ir_users,
                                         const std::vector<bool>& ir_output,
                                         ir::ValueId linear_result) {
  const ir::TensorType& type = program.value(linear_result).type;
  const std::vector<size_t>& users = ir_users[static_cast<size_t>(linear_result)];
  if (type.shape.empty() || type.shape.back() % 8 != 0 || type.has_dynamic_dims() ||
      users.size() != 1 || ir_output[static_cast<size_t>(linear_result)]) {
    return nullptr;
  }
  const ir::Node& reshape = program.nodes()[users[0]];
  if (reshape.op != "reshape" || reshape.operands.size() != 1 || reshape.results.size() != 1) {
    return nullptr;
  }
  const ir::ValueId viewed = reshape.results[0];
  const ir::TensorType& view_type = program.value(viewed).type;
  if (view_type.shape.empty() || view_type.shape.back() != type.shape.back() ||
      !epilogue_runs(program, runtime::GemmEpilogue::kBiasGeluAux, type.dtype)) {
    return nullptr;
  }
  for (size_t user : ir_users[static_cast<size_t>(viewed)]) {
    const ir::Node& node = program.nodes()[user];
    if (node.op == "gelu" && node.operands.size() == 1 && node.results.size() == 1 &&
        program.value(node.results[0]).type == view_type) {
      return &node;
    }
  }
  return nullptr;
}

// Note [Bias adds in the consumer's kernel]: with GROVE_BIAS_INTO_CONSUMERS=1
// a linear whose result (directly, or through the one reshape that puts its
// rows back into [B, T, N]) is read only by element-wise nodes other than the
// activations an epilogue applies (a residual add before a layer norm, the
// exact gelu's first multiplies) runs as a bare GEMM, and its bias add fuses
// into the kernel those readers make anyway, as Inductor's graphs have it
// (mm, then the bias in the add + layer norm kernel): a bias epilogue leads
// cuBLASLt's heuristic to other algorithms than a bare GEMM (BERT at batch 16
// ran four split-K GEMMs a layer against PyTorch's one, session 19 round 1).
// Linears read by anything else (attention, a GEMM, an output), and those of
// at most kMaxSmallM rows (grove's small-M kernel adds the bias for free), keep
// the epilogue. Off by default: on an H100 (session 19, round 2) BERT at
// batch 16 ran its graph in 150.1 us from C++ this way against 150.6 us with
// the epilogues, no gain. Tests:
// GemmEpilogueLowering.BiasJoinsTheConsumersKernelWhenAsked.
bool bias_adds_into_consumers_enabled() {
  const char* value = std::getenv("GROVE_BIAS_INTO_CONSUMERS");
  return value != nullptr && std::string(value) == "1";
}

bool bias_fuses_into_consumers(const ir::Program& program,
                               const std::vector<std::vector<size_t>>& ir_users,
                               const std::vector<bool>& ir_output, ir::ValueId linear_result,
                               int64_t most_small_rows) {
  ir::ValueId read = linear_result;
  const ir::TensorType& type = program.value(read).type;
  // Rows grove's small-M kernel may take keep the epilogue: there it is free.
  if (ir_output[static_cast<size_t>(read)] || type.shape.empty() || type.has_dynamic_dims() ||
      runtime::shape_numel(type.shape) / std::max<int64_t>(type.shape.back(), 1) <=
          most_small_rows) {
    return false;
  }
  const std::vector<size_t>* users = &ir_users[static_cast<size_t>(read)];
  if (users->size() == 1 && program.nodes()[users->front()].op == "reshape") {
    read = program.nodes()[users->front()].results[0];
    if (ir_output[static_cast<size_t>(read)]) return false;
    users = &ir_users[static_cast<size_t>(read)];
  }
  if (users->empty()) return false;
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  for (size_t user : *users) {
    const ir::Node& consumer = program.nodes()[user];
    if (registry.get(consumer.op).kind != ops::OpKind::kElementwise || consumer.op == "gelu" ||
        consumer.op == "relu" ||
        program.value(consumer.results[0]).type.shape != program.value(read).type.shape) {
      return false;
    }
  }
  return true;
}

// Note [Bias gradients from weight-gradient GEMMs]: a linear's gradient rule
// computes dW = matmul(transpose(G), X) and, later, db = sum(G) over every dim
// but the last (G: the output's gradient, maybe reshaped to [rows, N] for the
// GEMM). db is the row sums of the GEMM's op(A) = G^T, so the GEMM yields it
// too (kBiasGradA) and the reduction costs no kernel. Returns that `sum` node
// (it must come after the matmul, so its result's readers do too), or null.
const ir::Node* bias_gradient_sum(const ir::Program& program,
                                  const std::vector<std::vector<size_t>>& ir_users,
                                  const ir::Node& matmul, size_t matmul_index) {
  if (matmul.operands.size() != 2 || matmul.results.size() != 1) return nullptr;
  const ir::Value& transposed = program.value(matmul.operands[0]);
  const ir::TensorType& result_type = program.value(matmul.results[0]).type;
  if (transposed.producer < 0 || transposed.type.rank() != 2 || result_type.rank() != 2 ||
      program.value(matmul.operands[1]).type.rank() != 2 || result_type.has_dynamic_dims()) {
    return nullptr;
  }
  const ir::Node& transpose = program.nodes()[static_cast<size_t>(transposed.producer)];
  if (transpose.op != "transpose" || transpose.operands.size() != 1) return nullptr;
  auto dim = [&](const char* name) {
    int64_t d = transpose.attrs.get_int(name);
    return d < 0 ? d + 2 : d;
  };
  if (std::min(dim("dim0"), dim("dim1")) != 0 || std::max(dim("dim0"), dim("dim1")) != 1) {
    return nullptr;
  }
  // G itself, or G reshaped to [rows, N].
  ir::ValueId gradient = transpose.operands[0];
  const int64_t features = program.value(gradient).type.shape.back();
  const ir::Value& rows = program.value(gradient);
  if (rows.producer >= 0) {
    const ir::Node& reshape = program.nodes()[static_cast<size_t>(rows.producer)];
    if (reshape.op == "reshape" && reshape.operands.size() == 1 &&
        program.value(reshape.operands[0]).type.shape.back() == features) {
      gradient = reshape.operands[0];
    }
  }
  const ir::TensorType& gradient_type = program.value(gradient).type;
  for (size_t user : ir_users[static_cast<size_t>(gradient)]) {
    const ir::Node& sum = program.nodes()[user];
    if (user <= matmul_index || sum.op != "sum" || sum.results.size() != 1 ||
        !sum.attrs.has("dims")) {
      continue;
    }
    const ir::TensorType& sum_type = program.value(sum.results[0]).type;
    if (sum_type.dtype != result_type.dtype || sum_type.shape.empty() ||
        sum_type.shape.back() != features || runtime::shape_numel(sum_type.shape) != features) {
      continue;
    }
    // Every dim but the last is reduced.
    const int64_t rank = gradient_type.rank();
    std::vector<int64_t> dims;
    for (int64_t d : sum.attrs.get_ints("dims")) dims.push_back(d < 0 ? d + rank : d);
    std::sort(dims.begin(), dims.end());
    std::vector<int64_t> leading(static_cast<size_t>(rank - 1));
    for (int64_t d = 0; d + 1 < rank; ++d) leading[static_cast<size_t>(d)] = d;
    if (dims == leading &&
        epilogue_runs(program, runtime::GemmEpilogue::kBiasGradA, result_type.dtype,
                      result_type.shape[0], result_type.shape[1],
                      runtime::shape_numel(gradient_type.shape) / features)) {
      return &sum;
    }
  }
  return nullptr;
}

// Note [GEMM gelu gradients]: a GEMM (a linear without bias, or a 2-D matmul)
// whose result is read only by `gelu_backward(result, x)`, with x of the
// result's type already computed, yields the gelu_backward's result itself
// (kDGelu: the product times gelu'(x), x read as the aux matrix). Only when
// the row length is a multiple of 8, as cuBLASLt's aux matrix needs.
// The GEMM both forms of Note [GEMM gelu gradients] start from: a plain
// linear (no bias) or 2-D matmul whose one result is f32, bf16 or f16 of a
// static shape with rows a multiple of 8 (cuBLASLt's aux matrix), is not a
// program output and has one user, whose node it returns; else null.
const ir::Node* sole_user_of_gelu_gradient_gemm(const ir::Program& program,
                                                const std::vector<std::vector<size_t>>& ir_users,
                                                const std::vector<bool>& ir_output,
                                                const ir::Node& gemm) {
  if (gemm.results.size() != 1) return nullptr;
  const bool plain_linear = gemm.op == "linear" && gemm.operands.size() == 2;
  const bool plain_matmul = gemm.op == "matmul" && gemm.operands.size() == 2 &&
                            program.value(gemm.operands[0]).type.rank() == 2 &&
                            program.value(gemm.operands[1]).type.rank() == 2;
  if (!plain_linear && !plain_matmul) return nullptr;
  const ir::ValueId result = gemm.results[0];
  const ir::TensorType& type = program.value(result).type;
  const runtime::DType dtype = type.dtype;
  if (type.shape.empty() || type.shape.back() % 8 != 0 || type.has_dynamic_dims() ||
      ir_output[static_cast<size_t>(result)] || ir_users[static_cast<size_t>(result)].size() != 1 ||
      !(dtype == runtime::DType::kF32 || dtype == runtime::DType::kBF16 ||
        dtype == runtime::DType::kF16)) {
    return nullptr;
  }
  return &program.nodes()[ir_users[static_cast<size_t>(result)][0]];
}

const ir::Node* gelu_gradient_user(const ir::Program& program,
                                   const std::vector<std::vector<size_t>>& ir_users,
                                   const std::vector<bool>& ir_output, const ir::Node& gemm,
                                   const std::vector<int>& id_of) {
  const ir::Node* sole_user = sole_user_of_gelu_gradient_gemm(program, ir_users, ir_output, gemm);
  if (sole_user == nullptr) return nullptr;
  const ir::ValueId result = gemm.results[0];
  const ir::TensorType& type = program.value(result).type;
  const runtime::DType dtype = type.dtype;
  const ir::Node& user = *sole_user;
  if (user.op != "gelu_backward" || user.operands.size() != 2 || user.operands[0] != result ||
      user.operands[1] == result) {
    return nullptr;
  }
  const ir::ValueId x = user.operands[1];
  if (program.value(x).type != type || id_of[static_cast<size_t>(x)] < 0 ||
      !epilogue_runs(program, runtime::GemmEpilogue::kDGelu, dtype)) {
    return nullptr;
  }
  return &user;
}

// Note [GEMM gelu gradients], through a view: a GEMM whose result is read
// only by a reshape (the rows of a 3-d activation's gradient: a linear's
// [B*T, N] product as [B, T, N]) that is read only by `gelu_backward(view, x)`,
// x of the view's type already computed, neither value a program output (a
// backward made by make_fx or AOTAutograd from ATen). The GEMM yields the
// gelu_backward's result in its own rows; the reshape reads them and the
// gelu_backward's result is the reshape's. x is read as the aux matrix like C:
// both are contiguous with rows of the same length. Returns
// {gelu_backward, reshape}, or nulls.
std::pair<const ir::Node*, const ir::Node*> gelu_gradient_through_reshape(
    const ir::Program& program, const std::vector<std::vector<size_t>>& ir_users,
    const std::vector<bool>& ir_output, const ir::Node& gemm, const std::vector<int>& id_of) {
  const std::pair<const ir::Node*, const ir::Node*> none{nullptr, nullptr};
  const ir::Node* sole_user = sole_user_of_gelu_gradient_gemm(program, ir_users, ir_output, gemm);
  if (sole_user == nullptr) return none;
  const ir::TensorType& type = program.value(gemm.results[0]).type;
  const runtime::DType dtype = type.dtype;
  const ir::Node& reshape = *sole_user;
  if (reshape.op != "reshape" || reshape.operands.size() != 1 || reshape.results.size() != 1) {
    return none;
  }
  const ir::ValueId viewed = reshape.results[0];
  const ir::TensorType& view_type = program.value(viewed).type;
  if (view_type.shape.empty() || view_type.shape.back() != type.shape.back() ||
      ir_output[static_cast<size_t>(viewed)] || ir_users[static_cast<size_t>(viewed)].size() != 1) {
    return none;
  }
  const ir::Node& user = program.nodes()[ir_users[static_cast<size_t>(viewed)][0]];
  if (user.op != "gelu_backward" || user.operands.size() != 2 || user.operands[0] != viewed ||
      user.operands[1] == viewed || user.results.size() != 1) {
    return none;
  }
  const ir::ValueId x = user.operands[1];
  if (program.value(x).type != view_type || program.value(user.results[0]).type != view_type ||
      id_of[static_cast<size_t>(x)] < 0 ||
      !epilogue_runs(program, runtime::GemmEpilogue::kDGelu, dtype)) {
    return none;
  }
  return {&user, &reshape};
}

// Note [Bias adds as GEMM epilogues]: ATen writes a linear layer over a 3-d
// input that is not contiguous (nn.MultiheadAttention's in-projections of its
// seq-first view) as mm(rows, t(w)) -> _unsafe_view -> add(bias): the importer
// makes the mm a bias-less linear and the add a kernel of its own (two to
// three per decoder layer at batch 16). When the bias-less linear's result is
// read only by that add of a [N] bias of its dtype (directly, or through one
// reshape that keeps the last dim N, so every row still gets the whole bias),
// and neither is a program output, the GEMM adds the bias in its epilogue and
// the add's result is the (viewed) GEMM result. f32 rounding is the same (the
// product plus the bias, rounded once, as the add did). GROVE_GEMM_BIAS_ADDS=0
// keeps the add. Tests: GemmEpilogueLowering.BiasAddThroughAReshapeIsTheGemmsEpilogue,
// GemmEpilogueOnDevice.BiasAddThroughAReshapeMatchesTheReference.
struct BiasAdd {
  const ir::Node* add = nullptr;
  const ir::Node* reshape = nullptr;  // null when the add reads the linear directly
  ir::ValueId bias = ir::kNoValue;
};

bool bias_adds_enabled() {
  const char* value = std::getenv("GROVE_GEMM_BIAS_ADDS");
  return value == nullptr || std::string(value) != "0";
}

BiasAdd bias_add_user(const ir::Program& program, const std::vector<std::vector<size_t>>& ir_users,
                      const std::vector<bool>& ir_output, ir::ValueId linear_result,
                      const std::vector<int>& id_of) {
  const BiasAdd none;
  const ir::TensorType& type = program.value(linear_result).type;
  const std::vector<size_t>& users = ir_users[static_cast<size_t>(linear_result)];
  if (type.shape.empty() || type.has_dynamic_dims() || users.size() != 1 ||
      ir_output[static_cast<size_t>(linear_result)]) {
    return none;
  }
  BiasAdd found;
  ir::ValueId added = linear_result;
  const ir::Node* user = &program.nodes()[users[0]];
  if (user->op == "reshape" && user->results.size() == 1) {
    found.reshape = user;
    added = user->results[0];
    const std::vector<size_t>& readers = ir_users[static_cast<size_t>(added)];
    const ir::TensorType& viewed = program.value(added).type;
    if (readers.size() != 1 || ir_output[static_cast<size_t>(added)] || viewed.shape.empty() ||
        viewed.shape.back() != type.shape.back()) {
      return none;
    }
    user = &program.nodes()[readers[0]];
  }
  if (user->op != "add" || user->operands.size() != 2 || user->results.size() != 1 ||
      user->operands[0] == user->operands[1]) {
    return none;
  }
  const ir::ValueId bias = user->operands[0] == added ? user->operands[1] : user->operands[0];
  const ir::TensorType& bias_type = program.value(bias).type;
  const runtime::DType dtype = type.dtype;
  if ((dtype != runtime::DType::kF32 && dtype != runtime::DType::kBF16 &&
       dtype != runtime::DType::kF16) ||
      bias_type.dtype != dtype || bias_type.shape != ir::Shape{type.shape.back()} ||
      program.value(user->results[0]).type != program.value(added).type ||
      id_of[static_cast<size_t>(bias)] < 0 ||
      !epilogue_runs(program, runtime::GemmEpilogue::kBias, dtype)) {
    return none;
  }
  found.add = user;
  found.bias = bias;
  return found;
}

// Note [Exact gelu in the small-M GEMM]: whether `value` is a `full` scalar
// (shape []) of `expected` as the importer writes it (rounded to f32).
bool scalar_of(const ir::Program& program, ir::ValueId value, double expected) {
  const ir::Value& v = program.value(value);
  if (v.producer < 0 || !v.type.shape.empty()) return false;
  const ir::Node& full = program.nodes()[static_cast<size_t>(v.producer)];
  return full.op == "full" && full.attrs.has("value") &&
         static_cast<float>(full.attrs.get_float("value")) == static_cast<float>(expected);
}

// The nodes of mul(mul(x, 0.5), add(erf(mul(x, 1/sqrt 2)), 1)) reading `x`
// (Note [Exact gelu in the small-M GEMM]), each result read only inside the
// chain and none a program output, in either operand order; the last is the
// gelu's result. Empty when `x` is not read that way.
std::vector<size_t> exact_gelu_chain(const ir::Program& program,
                                     const std::vector<std::vector<size_t>>& ir_users,
                                     const std::vector<bool>& ir_output, ir::ValueId x) {
  const ir::TensorType& type = program.value(x).type;
  auto only_user = [&](ir::ValueId value) -> const ir::Node* {
    const std::vector<size_t>& users = ir_users[static_cast<size_t>(value)];
    if (users.size() != 1 || ir_output[static_cast<size_t>(value)]) return nullptr;
    return &program.nodes()[users[0]];
  };
  // op(value, scalar) in either order, of x's type, with one result.
  auto with_scalar = [&](const ir::Node& node, const char* op, ir::ValueId value, double scalar) {
    if (node.op != op || node.operands.size() != 2 || node.results.size() != 1 ||
        program.value(node.results[0]).type != type) {
      return false;
    }
    return (node.operands[0] == value && scalar_of(program, node.operands[1], scalar)) ||
           (node.operands[1] == value && scalar_of(program, node.operands[0], scalar));
  };
  const std::vector<size_t>& users = ir_users[static_cast<size_t>(x)];
  if (users.size() != 2 || users[0] == users[1] || ir_output[static_cast<size_t>(x)]) return {};
  size_t scaled = users[0], halved = users[1];
  if (!with_scalar(program.nodes()[scaled], "mul", x, 0.7071067811865476)) {
    std::swap(scaled, halved);
  }
  if (!with_scalar(program.nodes()[scaled], "mul", x, 0.7071067811865476) ||
      !with_scalar(program.nodes()[halved], "mul", x, 0.5)) {
    return {};
  }
  const ir::Node* erf = only_user(program.nodes()[scaled].results[0]);
  if (erf == nullptr || erf->op != "erf" || erf->operands.size() != 1 || erf->results.size() != 1 ||
      program.value(erf->results[0]).type != type) {
    return {};
  }
  const ir::Node* one_plus = only_user(erf->results[0]);
  if (one_plus == nullptr || !with_scalar(*one_plus, "add", erf->results[0], 1.0)) return {};
  const ir::Node* product = only_user(one_plus->results[0]);
  const ir::ValueId half = program.nodes()[halved].results[0];
  if (product == nullptr || product != only_user(half) || product->op != "mul" ||
      product->operands.size() != 2 || product->results.size() != 1 ||
      program.value(product->results[0]).type != type) {
    return {};
  }
  auto index_of = [&](const ir::Node* node) {
    return static_cast<size_t>(node - program.nodes().data());
  };
  return {scaled, halved, index_of(erf), index_of(one_plus), index_of(product)};
}

// Whether `value` is an input or a node's own result, or reshapes of one: a
// GEMM operand at offset 0 (Note [Exact gelu in the small-M GEMM]).
bool offset_free(const ir::Program& program, ir::ValueId value) {
  for (int hops = 0; hops < 8; ++hops) {
    const ir::Value& v = program.value(value);
    if (v.producer < 0) return true;
    const ir::Node& node = program.nodes()[static_cast<size_t>(v.producer)];
    if (node.op != "reshape") {
      return ops::OpRegistry::global().get(node.op).kind != ops::OpKind::kView;
    }
    value = node.operands[0];
  }
  return false;
}

// Whether `value` is an input or a node's own result, or reshapes and
// transposes of one (views that keep offset 0): a GEMM operand at offset 0
// (Note [Exact gelu in the tiny-K GEMM]).
bool offset_free_through_transposes(const ir::Program& program, ir::ValueId value) {
  for (int hops = 0; hops < 8; ++hops) {
    const ir::Value& v = program.value(value);
    if (v.producer < 0) return true;
    const ir::Node& node = program.nodes()[static_cast<size_t>(v.producer)];
    if (node.op != "reshape" && node.op != "transpose" && node.op != "permute") {
      return ops::OpRegistry::global().get(node.op).kind != ops::OpKind::kView;
    }
    value = node.operands[0];
  }
  return false;
}

// The full scalars a chain of nodes reads that nothing outside it reads,
// made after node `after` (Note [Exact gelu in the small-M GEMM]: absorbed with it).
std::vector<size_t> chain_scalars(const ir::Program& program,
                                  const std::vector<std::vector<size_t>>& ir_users,
                                  const std::vector<size_t>& chain, size_t after) {
  std::vector<size_t> scalars;
  for (size_t member : chain) {
    for (ir::ValueId operand : program.nodes()[member].operands) {
      const int producer = program.value(operand).producer;
      if (producer <= static_cast<int>(after) ||
          program.nodes()[static_cast<size_t>(producer)].op != "full") {
        continue;
      }
      bool inside = true;
      for (size_t user : ir_users[static_cast<size_t>(operand)]) {
        inside = inside && std::find(chain.begin(), chain.end(), user) != chain.end();
      }
      if (inside) scalars.push_back(static_cast<size_t>(producer));
    }
  }
  return scalars;
}

// exact_gelu_chain of a linear's result, or of its one reshape (keeping the
// last dim) when that is all that reads it.
std::vector<size_t> exact_gelu_through(const ir::Program& program,
                                       const std::vector<std::vector<size_t>>& ir_users,
                                       const std::vector<bool>& ir_output,
                                       ir::ValueId linear_result) {
  const std::vector<size_t>& users = ir_users[static_cast<size_t>(linear_result)];
  if (users.empty() || ir_output[static_cast<size_t>(linear_result)]) return {};
  const ir::Node& first = program.nodes()[users[0]];
  if (users.size() == 1 && first.op == "reshape" && first.results.size() == 1) {
    const ir::TensorType& viewed = program.value(first.results[0]).type;
    if (viewed.shape.empty() ||
        viewed.shape.back() != program.value(linear_result).type.shape.back()) {
      return {};
    }
    return exact_gelu_chain(program, ir_users, ir_output, first.results[0]);
  }
  return exact_gelu_chain(program, ir_users, ir_output, linear_result);
}

// A node the lowering adds beside the program's own (a view, or the bias add
// split off a linear): its definition from the registry and its context
// named `name`, on the program's device; attrs, operands and results are the
// caller's.
LoweringNode added_node(const ir::Program& program, NodeClass node_class, const std::string& name,
                        const std::string& op, std::vector<ir::TensorType> operand_types,
                        std::vector<std::string> operand_names) {
  LoweringNode node;
  node.node_class = node_class;
  node.name = name;
  node.op = op;
  node.def = &ops::OpRegistry::global().get(op);
  node.context.node_name = name;
  node.context.op = op;
  node.context.device = program.device();
  node.context.operand_types = std::move(operand_types);
  node.context.operand_names = std::move(operand_names);
  return node;
}
}  // namespace

bool small_m_exact_gelu_enabled() {
  const char* value = std::getenv("GROVE_SMALL_M_EXACT_GELU");
  return value == nullptr || std::string(value) != "0";
}

bool tiny_k_exact_gelu_enabled() {
  const char* value = std::getenv("GROVE_TINY_K_EXACT_GELU");
  if (value != nullptr && std::string(value) == "0") return false;
  const char* tiny_k = std::getenv("GROVE_TINY_K_GEMM");
  return tiny_k == nullptr || std::string(tiny_k) != "off";
}

bool gemm_epilogues_enabled() {
  const char* value = std::getenv("GROVE_GEMM_EPILOGUES");
  if (value == nullptr || *value == '\0') return true;
  const std::string text = value;
  GROVE_CHECK_AS(ConfigError, text == "0" || text == "1", "GROVE_GEMM_EPILOGUES='", text,
                 "': expected 1 (fuse bias and gelu into GEMMs, the default) or 0 (do not)");
  return text == "1";
}

int LoweringGraph::add_value(LoweringValue value) {
  values_.push_back(std::move(value));
  uses_.emplace_back();
  return static_cast<int>(values_.size()) - 1;
}

int LoweringGraph::add_node(LoweringNode node) {
  int index = static_cast<int>(nodes_.size());
  for (size_t k = 0; k < node.operands.size(); ++k) {
    uses_[static_cast<size_t>(node.operands[k])].emplace_back(index, static_cast<int>(k));
  }
  for (int result : node.results) values_[static_cast<size_t>(result)].producer = index;
  nodes_.push_back(std::move(node));
  return index;
}

LoweringGraph::LoweringGraph(const ir::Program& program, std::optional<SmallMGemmMode> small_m_gemm)
    : program_(program) {
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  std::vector<int> id_of(program.values().size(), -1);
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    const ir::Value& value = program.value(program.inputs()[i]);
    LoweringValue lowered{value.name, value.type, value.kind, -1, static_cast<int>(i), false};
    id_of[static_cast<size_t>(value.id)] = add_value(lowered);
    inputs_.push_back(id_of[static_cast<size_t>(value.id)]);
  }
  // IR uses per value (node indices) and program outputs, for epilogue fusion.
  std::vector<std::vector<size_t>> ir_users(program.values().size());
  for (size_t n = 0; n < program.nodes().size(); ++n) {
    for (ir::ValueId operand : program.nodes()[n].operands) {
      ir_users[static_cast<size_t>(operand)].push_back(n);
    }
  }
  std::vector<bool> ir_output(program.values().size(), false);
  for (ir::ValueId output : program.outputs()) ir_output[static_cast<size_t>(output)] = true;
  const bool epilogues = gemm_epilogues_enabled();
  // Note [Exact gelu in the small-M GEMM]: where grove's small-M kernel runs.
  const SmallMGemmMode small_m = small_m_gemm_mode(small_m_gemm);
  const bool small_m_runs =
      small_m == SmallMGemmMode::kOn ||
      (small_m == SmallMGemmMode::kAuto && program.device().type == runtime::DeviceType::kCuda);
  const bool exact_gelu_joins = epilogues && small_m_runs && small_m_exact_gelu_enabled();
  // Note [Exact gelu in the tiny-K GEMM].
  const bool exact_gelu_joins_tiny_k = epilogues && small_m_runs && tiny_k_exact_gelu_enabled();
  const bool bias_into_consumers = bias_adds_into_consumers_enabled();
  std::vector<bool> absorbed(program.nodes().size(), false);
  // An absorbed gelu read through a reshape: its result is that reshape's
  // (Note [GEMM epilogues in lowering]).
  std::vector<ir::ValueId> same_as(program.nodes().size(), ir::kNoValue);
  // Note [Repeated views computed once]: a view node the same as an earlier one
  // (op, operand and attributes), neither a program output, in a program that
  // writes nothing in place, is that one's value, so a view that must be
  // copied is copied once: nn.TransformerDecoder's layers each transposed and
  // flattened the same `memory` for their cross attention's key/value GEMM
  // (a [48 x B, 256] copy per layer). Tests: ViewLowering.RepeatedViewIsCopiedOnce,
  // ViewLoweringOnDevice.RepeatedViewsMatchTheReference.
  bool writes_in_place = false;
  for (const ir::Node& node : program.nodes()) {
    const ops::OpDef& def = registry.get(node.op);
    writes_in_place |=
        def.kind == ops::OpKind::kCopyUpdate || !def.effects.mutated_operands.empty();
  }
  std::map<std::string, int> earlier_views;

  for (size_t node_index = 0; node_index < program.nodes().size(); ++node_index) {
    if (absorbed[node_index]) {
      const ir::ValueId same = same_as[node_index];
      if (same != ir::kNoValue) {
        id_of[static_cast<size_t>(program.nodes()[node_index].results[0])] =
            id_of[static_cast<size_t>(same)];
      }
      continue;
    }
    const ir::Node& node = program.nodes()[node_index];
    const ops::OpDef& def = registry.get(node.op);
    LoweringNode lowered;
    lowered.node_class = classify(def);
    lowered.name = node.name;
    lowered.op = node.op;
    lowered.def = &def;
    lowered.context.node_name = node.name;
    lowered.context.op = node.op;
    lowered.context.device = program.device();
    for (ir::ValueId operand : node.operands) {
      const ir::Value& value = program.value(operand);
      lowered.context.operand_types.push_back(value.type);
      lowered.context.operand_names.push_back(value.name);
      int id = id_of[static_cast<size_t>(operand)];
      GROVE_CHECK(id >= 0, "lowering: node '", node.name, "' reads '", value.name,
                  "' before it is defined; run Program::verify()");
      lowered.operands.push_back(id);
    }
    lowered.context.attrs = registry.normalize_attrs(lowered.context, node.attrs);
    std::string view_key;
    if (!writes_in_place && def.kind == ops::OpKind::kView && lowered.operands.size() == 1 &&
        node.results.size() == 1 && !ir_output[static_cast<size_t>(node.results[0])]) {
      view_key = str_cat(node.op, '|', lowered.operands[0], '|', lowered.context.attrs.str());
      if (auto earlier = earlier_views.find(view_key); earlier != earlier_views.end()) {
        id_of[static_cast<size_t>(node.results[0])] = earlier->second;
        continue;
      }
    }
    if (node.op == "embedding") lowered.pointwise = PointwiseKind::kEmbedding;
    if (node.op == "dropout") lowered.pointwise = PointwiseKind::kDropout;

    std::vector<int> results;
    for (ir::ValueId result : node.results) {
      const ir::Value& value = program.value(result);
      int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
      id_of[static_cast<size_t>(result)] = id;
      results.push_back(id);
    }
    if (!view_key.empty()) earlier_views.emplace(view_key, results[0]);
    if (lowered.node_class == NodeClass::kPointwise) {
      lowered.in_place_operand.assign(results.size(), -1);
      if (def.kind == ops::OpKind::kCopyUpdate) {
        for (size_t r = 0; r < results.size() && r < def.effects.result_aliases.size(); ++r) {
          if (def.effects.result_aliases[r]) {
            lowered.in_place_operand[r] = *def.effects.result_aliases[r];
          }
        }
      }
    }

    bool split_bias = node.op == "linear" && node.operands.size() == 3;
    if (split_bias && epilogues && bias_into_consumers &&
        bias_fuses_into_consumers(program, ir_users, ir_output, node.results[0], kMaxSmallM)) {
      // Note [Bias adds in the consumer's kernel]: the GEMM runs bare and the
      // add joins the kernel its readers make anyway; through a reshape, the
      // reshape views the bare product and the add comes after it (a view
      // would keep the add out of its readers' kernel).
      const std::vector<size_t>& users = ir_users[static_cast<size_t>(node.results[0])];
      const ir::Node& first_user = program.nodes()[users.front()];
      if (users.size() == 1 && first_user.op == "reshape") {
        const ir::TensorType linear_type = values_[static_cast<size_t>(results[0])].type;
        LoweringNode gemm = lowered;
        gemm.operands.pop_back();
        gemm.context.operand_types.pop_back();
        gemm.context.operand_names.pop_back();
        gemm.results = results;  // the linear's value is the bare product
        gemm.transpose_b = true;
        add_node(std::move(gemm));
        const ir::Value& viewed = program.value(first_user.results[0]);
        const int product_view = add_value(
            LoweringValue{viewed.name + ".product", viewed.type, ir::ValueKind::kNodeResult});
        LoweringNode view = added_node(program, NodeClass::kView, first_user.name, "reshape",
                                       {linear_type}, {program.value(node.results[0]).name});
        view.context.attrs = registry.normalize_attrs(view.context, first_user.attrs);
        view.operands = {results[0]};
        view.results = {product_view};
        add_node(std::move(view));
        const int sum =
            add_value(LoweringValue{viewed.name, viewed.type, viewed.kind, -1, -1, false});
        id_of[static_cast<size_t>(viewed.id)] = sum;
        absorbed[users.front()] = true;
        LoweringNode bias =
            added_node(program, NodeClass::kPointwise, first_user.name, "add",
                       {viewed.type, lowered.context.operand_types[2]},
                       {viewed.name + ".product", lowered.context.operand_names[2]});
        bias.operands = {product_view, lowered.operands[2]};
        bias.results = {sum};
        bias.in_place_operand = {-1};
        add_node(std::move(bias));
        continue;
      }
    } else if (split_bias && epilogues) {
      // Note [GEMM epilogues in lowering].
      const ir::TensorType& result_type = values_[static_cast<size_t>(results[0])].type;
      const ir::TensorType& bias_type = lowered.context.operand_types[2];
      const runtime::DType dtype = result_type.dtype;
      bool gemm_dtype = dtype == runtime::DType::kF32 || dtype == runtime::DType::kBF16 ||
                        dtype == runtime::DType::kF16;
      if (gemm_dtype && bias_type.dtype == dtype && !result_type.shape.empty() &&
          bias_type.shape == ir::Shape{result_type.shape.back()} &&
          !result_type.has_dynamic_dims()) {
        lowered.transpose_b = true;
        lowered.epilogue = runtime::GemmEpilogue::kBias;
        lowered.results = results;
        const ir::ValueId linear_result = node.results[0];
        const std::vector<size_t>& users = ir_users[static_cast<size_t>(linear_result)];
        // Note [ReLU epilogues]: relu as the GEMM's epilogue too, where the device runs it.
        const bool relu_runs = epilogue_runs(program, runtime::GemmEpilogue::kBiasRelu, dtype);
        const ir::Node* through_reshape =
            activation_through_reshape(program, ir_users, ir_output, linear_result, "gelu");
        if (through_reshape == nullptr && relu_runs) {
          through_reshape =
              activation_through_reshape(program, ir_users, ir_output, linear_result, "relu");
        }
        const std::string direct_op = users.size() == 1 ? program.nodes()[users[0]].op : "";
        if (through_reshape != nullptr) {
          // The GEMM yields the activation of the linear's rows; the reshape
          // reads it, and the activation's result is the reshape's.
          const size_t activation_index =
              static_cast<size_t>(through_reshape - program.nodes().data());
          const ir::Node& reshape = program.nodes()[users[0]];
          lowered.epilogue = through_reshape->op == "gelu" ? runtime::GemmEpilogue::kBiasGelu
                                                           : runtime::GemmEpilogue::kBiasRelu;
          absorbed[activation_index] = true;
          same_as[activation_index] = reshape.results[0];
        } else if ((direct_op == "gelu" || (direct_op == "relu" && relu_runs)) &&
                   !ir_output[static_cast<size_t>(linear_result)]) {
          // The GEMM yields the activation's result; the linear's own value never exists.
          const ir::Node& activation = program.nodes()[users[0]];
          const ir::Value& value = program.value(activation.results[0]);
          values_.pop_back();
          uses_.pop_back();
          id_of[static_cast<size_t>(linear_result)] = -1;
          int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
          id_of[static_cast<size_t>(activation.results[0])] = id;
          lowered.results = {id};
          lowered.epilogue = direct_op == "gelu" ? runtime::GemmEpilogue::kBiasGelu
                                                 : runtime::GemmEpilogue::kBiasRelu;
          absorbed[users[0]] = true;
        } else if (exact_gelu_joins && dtype == runtime::DType::kF32 &&
                   runtime::shape_numel(result_type.shape) / result_type.shape.back() <=
                       kMaxSmallM &&
                   offset_free(program, node.operands[0]) &&
                   !exact_gelu_through(program, ir_users, ir_output, linear_result).empty()) {
          // Note [Exact gelu in the small-M GEMM]: the GEMM yields the gelu of
          // its rows; through a reshape, the reshape reads them and the
          // gelu's result is the reshape's.
          const std::vector<size_t> chain =
              exact_gelu_through(program, ir_users, ir_output, linear_result);
          const size_t result_node = chain.back();
          // The chain's own constants, read nowhere else.
          const std::vector<size_t> scalars = chain_scalars(program, ir_users, chain, node_index);
          for (size_t member : chain) absorbed[member] = true;
          for (size_t scalar : scalars) absorbed[scalar] = true;
          lowered.exact_gelu = true;
          const ir::Node& first_user = program.nodes()[users[0]];
          if (first_user.op == "reshape") {
            same_as[result_node] = first_user.results[0];
          } else {
            const ir::Value& value = program.value(program.nodes()[result_node].results[0]);
            values_.pop_back();
            uses_.pop_back();
            id_of[static_cast<size_t>(linear_result)] = -1;
            int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
            id_of[static_cast<size_t>(value.id)] = id;
            lowered.results = {id};
          }
        } else if (const ir::Node* gelu = aux_gelu_user(program, ir_users, linear_result)) {
          // Note [GEMM auxiliary output in lowering].
          const ir::Value& value = program.value(gelu->results[0]);
          int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
          id_of[static_cast<size_t>(gelu->results[0])] = id;
          lowered.results = {id, results[0]};
          lowered.epilogue = runtime::GemmEpilogue::kBiasGeluAux;
          absorbed[static_cast<size_t>(gelu - program.nodes().data())] = true;
        } else if (const ir::Node* viewed_gelu =
                       aux_gelu_through_reshape(program, ir_users, ir_output, linear_result)) {
          // Note [GEMM auxiliary output in lowering], through a view.
          const ir::TensorType rows_type = result_type;  // add_value may move values_
          const ir::Value& value = program.value(viewed_gelu->results[0]);
          const std::string rows_name = value.name + ".rows";
          int rows = add_value(
              LoweringValue{rows_name, rows_type, ir::ValueKind::kNodeResult, -1, -1, false});
          lowered.results = {rows, results[0]};
          lowered.epilogue = runtime::GemmEpilogue::kBiasGeluAux;
          absorbed[static_cast<size_t>(viewed_gelu - program.nodes().data())] = true;
          add_node(std::move(lowered));
          int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
          id_of[static_cast<size_t>(viewed_gelu->results[0])] = id;
          LoweringNode view = added_node(program, NodeClass::kView, viewed_gelu->name, "reshape",
                                         {rows_type}, {rows_name});
          view.context.attrs = registry.normalize_attrs(
              view.context, ir::Attributes{{"shape", std::vector<int64_t>(value.type.shape)}});
          view.operands = {rows};
          view.results = {id};
          add_node(std::move(view));
          continue;
        }
        add_node(std::move(lowered));
        continue;
      }
    }
    if (!split_bias && epilogues && node.op == "matmul") {
      if (const ir::Node* sum = bias_gradient_sum(program, ir_users, node, node_index)) {
        // Note [Bias gradients from weight-gradient GEMMs].
        const ir::Value& value = program.value(sum->results[0]);
        int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
        id_of[static_cast<size_t>(sum->results[0])] = id;
        lowered.results = {results[0], id};
        lowered.epilogue = runtime::GemmEpilogue::kBiasGradA;
        absorbed[static_cast<size_t>(sum - program.nodes().data())] = true;
        add_node(std::move(lowered));
        continue;
      }
    }
    if (!split_bias && epilogues) {
      if (const ir::Node* gelu = gelu_gradient_user(program, ir_users, ir_output, node, id_of)) {
        // Note [GEMM gelu gradients]: the GEMM's value is never materialized.
        const ir::Value& value = program.value(gelu->results[0]);
        values_.pop_back();
        uses_.pop_back();
        id_of[static_cast<size_t>(node.results[0])] = -1;
        int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
        id_of[static_cast<size_t>(gelu->results[0])] = id;
        const ir::Value& x = program.value(gelu->operands[1]);
        lowered.operands.push_back(id_of[static_cast<size_t>(gelu->operands[1])]);
        lowered.context.operand_types.push_back(x.type);
        lowered.context.operand_names.push_back(x.name);
        lowered.results = {id};
        lowered.transpose_b = node.op == "linear";
        lowered.epilogue = runtime::GemmEpilogue::kDGelu;
        absorbed[static_cast<size_t>(gelu - program.nodes().data())] = true;
        add_node(std::move(lowered));
        continue;
      }
      const auto [gelu, reshape] =
          gelu_gradient_through_reshape(program, ir_users, ir_output, node, id_of);
      if (gelu != nullptr) {
        // The GEMM's own rows hold the gelu_backward's result, which the
        // reshape views (Note [GEMM gelu gradients], through a view).
        const ir::Value& x = program.value(gelu->operands[1]);
        lowered.operands.push_back(id_of[static_cast<size_t>(gelu->operands[1])]);
        lowered.context.operand_types.push_back(x.type);
        lowered.context.operand_names.push_back(x.name);
        lowered.results = results;
        lowered.transpose_b = node.op == "linear";
        lowered.epilogue = runtime::GemmEpilogue::kDGelu;
        const size_t gelu_index = static_cast<size_t>(gelu - program.nodes().data());
        absorbed[gelu_index] = true;
        same_as[gelu_index] = reshape->results[0];
        add_node(std::move(lowered));
        continue;
      }
    }
    if (!split_bias && epilogues && node.op == "linear" && node.operands.size() == 2 &&
        bias_adds_enabled()) {
      const BiasAdd bias_add = bias_add_user(program, ir_users, ir_output, node.results[0], id_of);
      if (bias_add.add != nullptr) {
        // Note [Bias adds as GEMM epilogues].
        const ir::Value& bias = program.value(bias_add.bias);
        lowered.operands.push_back(id_of[static_cast<size_t>(bias_add.bias)]);
        lowered.context.operand_types.push_back(bias.type);
        lowered.context.operand_names.push_back(bias.name);
        lowered.results = results;
        lowered.transpose_b = true;
        lowered.epilogue = runtime::GemmEpilogue::kBias;
        const size_t add_index = static_cast<size_t>(bias_add.add - program.nodes().data());
        absorbed[add_index] = true;
        same_as[add_index] =
            bias_add.reshape != nullptr ? bias_add.reshape->results[0] : node.results[0];
        // Note [Exact gelu in the tiny-K GEMM].
        const ir::TensorType& x_type = program.value(node.operands[0]).type;
        const int64_t inner = x_type.shape.empty() ? 0 : x_type.shape.back();
        const int64_t rows = inner > 0 ? runtime::shape_numel(x_type.shape) / inner : 0;
        const std::vector<size_t> chain =
            exact_gelu_joins_tiny_k && x_type.dtype == runtime::DType::kF32 && inner >= 1 &&
                    inner <= kMaxTinyK && rows > kMaxMeasuredSmallM &&
                    rows <= kMaxTinyKExactGeluRows &&
                    offset_free_through_transposes(program, node.operands[0])
                ? exact_gelu_chain(program, ir_users, ir_output, bias_add.add->results[0])
                : std::vector<size_t>{};
        if (!chain.empty()) {
          for (size_t member : chain) absorbed[member] = true;
          for (size_t scalar : chain_scalars(program, ir_users, chain, node_index)) {
            absorbed[scalar] = true;
          }
          same_as[chain.back()] = same_as[add_index];
          lowered.exact_gelu = true;
        }
        add_node(std::move(lowered));
        continue;
      }
    }
    if (!split_bias) {
      lowered.results = results;
      lowered.transpose_b = node.op == "linear";
      add_node(std::move(lowered));
      continue;
    }
    // linear(x, w, b) = add(gemm(x, w^T), b): the add is an ordinary pointwise
    // node, so it fuses with the elementwise work after it.
    const ir::TensorType result_type = values_[static_cast<size_t>(results[0])].type;
    int product =
        add_value(LoweringValue{node.name + ".product", result_type, ir::ValueKind::kNodeResult});
    LoweringNode gemm = lowered;
    gemm.operands.pop_back();
    gemm.context.operand_types.pop_back();
    gemm.context.operand_names.pop_back();
    gemm.results = {product};
    gemm.transpose_b = true;
    add_node(std::move(gemm));

    LoweringNode bias = added_node(program, NodeClass::kPointwise, node.name, "add",
                                   {result_type, lowered.context.operand_types[2]},
                                   {node.name + ".product", lowered.context.operand_names[2]});
    bias.operands = {product, lowered.operands[2]};
    bias.results = results;
    bias.in_place_operand = {-1};
    add_node(std::move(bias));
  }
  for (ir::ValueId output : program.outputs()) {
    int id = id_of[static_cast<size_t>(output)];
    values_[static_cast<size_t>(id)].is_output = true;
    outputs_.push_back(id);
  }
}

}  // namespace grove::compiler::lowering
