// LoweringGraph is the lowering's own view of a Program: the same values and
// nodes, each node classified by how it runs (a pointwise expression, a
// row-wise reduction, a view, a library GEMM, a concat, or host work), with
// `linear` split into a GEMM and a pointwise bias add so that the bias (and
// whatever elementwise work follows) fuses into one epilogue kernel.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "compiler/lowering/small_m_gemm_mode.h"
#include "compiler/ops/op_registry.h"
#include "runtime/blas.h"

namespace grove::compiler::lowering {

enum class NodeClass : uint8_t {
  kPointwise,  // one value per element from operand values (incl. copy/update, dropout, embedding)
  kReduction,  // row-wise: OpDef::reduction_plan / reduction_expr
  kView,       // reshape / transpose / permute / slice
  kGemm,       // matmul (and the product part of linear)
  kConcat,     // one copy kernel per operand into slices of the result
  kHost,       // nonzero, print: host work between segments
  kAttention,  // attention: its own kernel (attention_kernel.h)
};

// How a pointwise node builds its expression.
enum class PointwiseKind : uint8_t { kHook, kEmbedding, kDropout };

struct LoweringValue {
  std::string name;
  ir::TensorType type;
  ir::ValueKind kind = ir::ValueKind::kNodeResult;
  int producer = -1;        // node index in LoweringGraph::nodes, -1 for program inputs
  int input_position = -1;  // position in Program::inputs()
  bool is_output = false;
  bool dynamic() const { return type.has_dynamic_dims(); }
};

struct LoweringNode {
  NodeClass node_class = NodeClass::kPointwise;
  PointwiseKind pointwise = PointwiseKind::kHook;
  std::string name;  // the IR node's name (errors and segment reports cite it)
  std::string op;    // the op this node runs ("add" for a linear's bias)
  const ops::OpDef* def = nullptr;
  ops::OpContext context;  // normalized attrs, operand types
  std::vector<int> operands;
  std::vector<int> results;
  // kPointwise: for each result, the operand it is written into in place (-1: a new value).
  std::vector<int> in_place_operand;
  bool transpose_b = false;  // kGemm: op(B) = B^T (linear's weight)
  // kGemm: bias (operand 2) and gelu applied by the GEMM (Note [GEMM epilogues in lowering]);
  // with kBiasGeluAux, results are {gelu's result, the linear's pre-activation}.
  runtime::GemmEpilogue epilogue = runtime::GemmEpilogue::kNone;
  // kGemm with a kBias epilogue: the exact gelu applied after the bias, by
  // grove's small-M kernel (Note [Exact gelu in the small-M GEMM]).
  bool exact_gelu = false;
  bool in_place() const;
};

// Note [GEMM epilogues in lowering]: `linear(x, w, b)` becomes one GEMM node
// whose epilogue adds the bias (operand 2), and when the linear's result is
// read only by a `gelu` (and is not a program output) the GEMM applies the gelu
// too and yields the gelu's result: the bias and activation cost no kernel
// (cuBLASLt epilogues on cuda, the host GEMM's on sim/cpu; both use gelu's tanh
// approximation, as the gelu op does). GROVE_GEMM_EPILOGUES=0 turns this off:
// the linear is then a GEMM plus a pointwise bias add that fuses with the
// elementwise work after it. When the linear's result is also needed (a
// training forward saves it for gelu's gradient), the GEMM yields both the
// gelu's result and, through cuBLASLt's aux output, the pre-activation
// (kBiasGeluAux, Note [GEMM auxiliary output in lowering]).
//
// Note [ReLU epilogues]: a linear with a bias read only by a `relu` (directly or
// through a reshape, as for gelu) is one GEMM with cuBLASLt's RELU_BIAS
// epilogue (max(0, product + bias), exact, so the same bits as the relu
// kernel it replaces) where the device's BLAS runs it, and grove's small-M
// kernel applies the same max (nn.TransformerDecoder's feed-forward: one relu
// kernel per layer less). Tests: GemmEpilogueLowering.LinearReluIsOneGemm,
// GemmEpilogueOnDevice.LinearReluThroughAReshapeMatchesTheReference.
bool gemm_epilogues_enabled();

// Note [Exact gelu in the small-M GEMM]: PyTorch's default gelu, which the
// importer writes as mul(mul(x, 0.5), add(erf(mul(x, 1/sqrt 2)), 1)), after a
// linear with a bias whose rows grove's small-M kernel computes (at most
// kMaxSmallM rows: batch-1 ViT and MLP-Mixer, BERT's 24 tokens; f32) is that
// kernel's epilogue, the same expression on the product plus the bias, where
// it was a kernel of its own (cuBLASLt has only the tanh gelu). Only where the
// small-M kernel will run: its mode on, or auto on cuda (the kernel is then
// chosen for this GEMM without measuring the library: the launch it saves is
// worth more than a faster product); the linear's input an offset-free
// value. GROVE_SMALL_M_EXACT_GELU=0 keeps the gelu's kernel. Tests:
// SmallMGemmOnDevice.ExactGeluIsTheKernelsEpilogue (small_m_gemm_test.cc).
bool small_m_exact_gelu_enabled();

class LoweringGraph {
 public:
  // `small_m_gemm`: the compile's small-M mode (Note [Small-M GEMM selection]),
  // which decides where the exact gelu joins a GEMM (Note [Exact gelu in the
  // small-M GEMM]).
  explicit LoweringGraph(const ir::Program& program,
                         std::optional<SmallMGemmMode> small_m_gemm = std::nullopt);

  const ir::Program& program() const { return program_; }
  const std::vector<LoweringValue>& values() const { return values_; }
  const LoweringValue& value(int id) const { return values_.at(static_cast<size_t>(id)); }
  const std::vector<LoweringNode>& nodes() const { return nodes_; }
  const LoweringNode& node(int index) const { return nodes_.at(static_cast<size_t>(index)); }
  // Lowering value ids of the program's inputs (call order) and outputs.
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  // (node, operand position) pairs reading each value.
  const std::vector<std::vector<std::pair<int, int>>>& uses() const { return uses_; }

 private:
  int add_value(LoweringValue value);
  int add_node(LoweringNode node);

  const ir::Program& program_;
  std::vector<LoweringValue> values_;
  std::vector<LoweringNode> nodes_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
  std::vector<std::vector<std::pair<int, int>>> uses_;
};

}  // namespace grove::compiler::lowering
