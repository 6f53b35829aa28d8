// OpRegistry holds ONE definition (OpDef) per op: its attributes, type
// inference, effects, graph safety, lowering kind and hooks, and its gradient
// rule. Every layer that needs to know about an op asks the registry.
//
// API summary (stable; the lowering, codegen and autodiff build on it):
//   OpRegistry::global()        every built-in op (list: op_names()),
//                               registered on first use.
//   get(name) / find(name)      the OpDef; get throws naming known ops.
//   normalize_attrs(ctx, attrs) fills defaults, rejects unknown/mistyped attrs.
//   infer_types(ctx)            checks operand count and runs OpDef::infer;
//                               ShapeError / DTypeError name node and operands.
//   OpDef::kind                 how the lowering treats the op:
//     kElementwise  one value per output element; `elementwise_expr` appends
//                   codegen Exprs computing each result from operand Exprs.
//     kReduction    a row-wise pattern (sum/mean/max, softmax, log_softmax,
//                   layer_norm, cross_entropy, mse_loss): `reduction_plan`
//                   says which dims form the row and how each operand is laid
//                   out; `reduction_expr` appends Exprs and Reductions to a
//                   KernelSpec (Note [Kernel spec reductions]).
//     kView         reshape/transpose/permute/slice: no kernel, result
//                   aliases operand 0 (reshape of a non-contiguous value
//                   is the lowering's business).
//     kMatmul       matmul, linear: library GEMM (cuBLAS / host BLAS).
//     kCopyUpdate   copy_into, sgd_momentum_update, adamw_update: elementwise
//                   kernels that write mutated operands in place; the
//                   `elementwise_expr` hook returns one Expr per result, the
//                   i-th result being stored into the operand it aliases.
//     kRandom       dropout: elementwise with Philox draws (ops/philox.h).
//     kGather       embedding, concat: index-driven copies.
//     kSpecial      nonzero (host sync), print (host only): no kernel hook.
//     kAttention    attention: one generated kernel of its own
//                   (lowering/attention_kernel.h, Note [Fused attention op]).
//   OpDef::effects              mutated operand indices; per-result aliased
//                               operand; whether the op has a host side effect.
//   OpDef::graph_safety(mode)   capturable / needs host sync / host only.
//   OpDef::gradient             empty until autodiff (issue 5) fills it through
//                               OpRegistry::set_gradient.
//
// Numerics: floating math is defined in float64 by compiler/reference and
// computed in f32 by kernels (bf16 values are loaded as f32 and accumulate in
// f32). gelu is the tanh approximation:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_builder.h"
#include "compiler/codegen/kernel_spec.h"
#include "compiler/ir/attributes.h"
#include "compiler/ir/tensor_type.h"
#include "runtime/platform.h"
#include "runtime/tensor.h"

namespace grove::compiler::ir {
class ProgramBuilder;
struct Node;
}  // namespace grove::compiler::ir

namespace grove::compiler::ops {

using ir::Attributes;
using ir::AttrKind;
using ir::AttrValue;
using ir::TensorType;
using runtime::Device;
using runtime::DType;
using runtime::Shape;

enum class OpKind : uint8_t {
  kElementwise,
  kReduction,
  kView,
  kMatmul,
  kCopyUpdate,
  kRandom,
  kGather,
  kSpecial,
  kAttention,
};

enum class GraphSafety : uint8_t {
  kCapturable,     // may be recorded into a CUDA graph
  kNeedsHostSync,  // reads device data on the host (data-dependent shape, .item())
  kHostOnly,       // runs on the host (callbacks, printing)
};

enum class ExecMode : uint8_t { kInference, kTraining };

const char* op_kind_name(OpKind kind);
const char* graph_safety_name(GraphSafety safety);

// What an op's hooks see about one node. Operand names are for messages.
struct OpContext {
  std::string node_name;
  std::string op;
  std::vector<TensorType> operand_types;
  std::vector<std::string> operand_names;
  Attributes attrs;                     // normalized (defaults filled)
  Device device = runtime::kCpuDevice;  // the program's device (for ops without operands)

  const TensorType& operand(size_t index) const { return operand_types.at(index); }
  // "node 'fc0' (linear)": the prefix of every message about this node.
  std::string where() const;
  // "operand 1 'w0' f32[512, 512]"
  std::string describe_operand(size_t index) const;
};

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::kInt;
  std::optional<AttrValue> default_value;  // required when empty
};

struct Effects {
  std::vector<int> mutated_operands;               // operands written in place
  std::vector<std::optional<int>> result_aliases;  // per result: the operand it aliases
  bool host_side_effect = false;                   // e.g. print: never dead-code eliminated
};

// Builds the Exprs of an elementwise (or copy/update) op. `operand_exprs[i]`
// holds operand i's value as f32 for floating dtypes (the dtype it has
// otherwise). Returns one Expr per result; codegen converts to the result dtype
// on store.
using ElementwiseExprFn = std::function<std::vector<int>(codegen::KernelBuilder& emitter,
                                                         const std::vector<int>& operand_exprs,
                                                         const OpContext& context)>;

// How an operand of a row-wise op maps onto the [rows..., row] iteration space.
enum class RowLayout : uint8_t {
  kFull,       // has every iteration dimension (the row operand)
  kPerRow,     // indexed by the non-reduced dims only (cross_entropy labels)
  kPerColumn,  // indexed by the reduced dims only (layer_norm weight and bias)
  kScalar,     // a single value
};

struct ReductionPlan {
  std::vector<int64_t> reduced_dims;  // dims of operand 0 that form the row (sorted)
  bool keepdim = false;               // per-row results keep the reduced dims as size 1
  bool per_row_result = true;         // false: the result has operand 0's shape (softmax)
  bool mean_over_rows = false;        // the per-row values are then averaged to a scalar
  std::vector<RowLayout> operand_layouts;
};

using ReductionPlanFn = std::function<ReductionPlan(const OpContext& context)>;
// Appends the row computation; `operand_exprs` are loads laid out per the
// plan. Returns the Expr of the result (per row or per element).
using ReductionExprFn =
    std::function<int(codegen::KernelBuilder& emitter, const std::vector<int>& operand_exprs,
                      const OpContext& context)>;

// Gradient rules are written by the autodiff (issue 5). GradientContext is
// defined there; it gives the node, its operands, results, and the upstream
// gradients, and a ProgramBuilder to emit the backward into. A rule returns
// one gradient per operand (ir::kNoValue where the operand is not
// differentiable, e.g. integer labels).
struct GradientContext;
using GradientRule = std::function<std::vector<ir::ValueId>(GradientContext& context)>;

using InferFn = std::function<std::vector<TensorType>(const OpContext& context)>;
// A kSpecial op the lowering runs as one step calling this hook instead of
// generated code (collectives: all_reduce). The hook gets the operand tensors
// (contiguous) and enqueues its work on `stream` (the device's current
// stream). An op that lists mutated operands works in place: result r is
// operand r (such ops may be variadic, so Effects::result_aliases stays empty
// and mutated_operands lists them all). An op that mutates none computes into
// fresh result tensors, handed to the hook after the operands (Note [Launch
// hooks with fresh results], compiler/lowering/scheduler.cc).
// Capturable unless graph_safety says otherwise.
using LaunchFn =
    std::function<void(const OpContext& context, const std::vector<runtime::Tensor>& operands,
                       runtime::StreamHandle stream)>;
using GraphSafetyFn = std::function<GraphSafety(ExecMode mode)>;

struct OpDef {
  std::string name;
  std::string summary;  // one line, for docs and --help
  int min_operands = 0;
  int max_operands = 0;  // -1: variadic
  std::vector<AttrSpec> attrs;
  OpKind kind = OpKind::kElementwise;
  InferFn infer;
  Effects effects;
  GraphSafetyFn graph_safety;           // empty: capturable in every mode
  bool accepts_dynamic_shapes = false;  // may take a kDynamicDim operand (print, cast)
  ElementwiseExprFn elementwise_expr;   // kElementwise, kCopyUpdate
  ReductionPlanFn reduction_plan;       // kReduction
  ReductionExprFn reduction_expr;       // kReduction
  LaunchFn launch;                      // kSpecial lowered by a runtime hook
  GradientRule gradient;                // filled by autodiff

  GraphSafety safety(ExecMode mode) const {
    return graph_safety ? graph_safety(mode) : GraphSafety::kCapturable;
  }
};

class OpRegistry {
 public:
  // The process-wide registry with every built-in op.
  static OpRegistry& global();

  // Adds an op; throws grove::Error if the name is taken.
  void add(OpDef def);
  const OpDef* find(const std::string& name) const;
  // Throws grove::Error "unknown op 'x'" listing the known ops.
  const OpDef& get(const std::string& name) const;
  std::vector<std::string> op_names() const;  // sorted
  void set_gradient(const std::string& name, GradientRule rule);

  // Returns `attrs` with defaults filled. Throws grove::Error naming the node
  // (context.where()) and the attribute when one is unknown, missing or of the
  // wrong kind.
  Attributes normalize_attrs(const OpContext& context, const Attributes& attrs) const;
  // Checks the operand count and dynamic shapes, then runs the op's inference
  // on a context whose attrs are normalized. Throws ShapeError / DTypeError /
  // grove::Error naming the node and the operands.
  std::vector<TensorType> infer_types(const OpContext& context) const;

 private:
  std::map<std::string, std::unique_ptr<OpDef>> ops_;
};

}  // namespace grove::compiler::ops
