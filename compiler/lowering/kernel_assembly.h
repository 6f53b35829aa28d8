// KernelAssembler turns one fusion group (fusion.h) into a KernelSpec: it
// chooses the iteration space (the root's result shape, or the reduction's
// rows), walks the group's tree from the root, loads every materialized leaf
// with strides derived from its static layout through an AccessMap, and
// calls each op's lowering hook (OpDef::elementwise_expr / reduction_expr) to
// append its expressions. It also builds the small kernels that are not
// groups: layout copies, concat parts and the row mean of cross_entropy.
#pragma once

#include <map>
#include <stdexcept>
#include <vector>

#include "compiler/lowering/fusion.h"
#include "compiler/lowering/lowering_graph.h"
#include "compiler/lowering/steps.h"

namespace grove::compiler::lowering {

// Thrown while assembling when a leaf's layout cannot be read through a
// merged-dims map; the scheduler then copies `value` into a layout that can
// (Note [Merged reduction dims]) and assembles again.
struct NeedsRelayout {
  int value = -1;
  AccessMap map;
};

// The most operands a concat computes in one kernel (Note [One kernel for a
// concat of equal parts]: each element reads every part).
constexpr size_t kMaxConcatParts = 4;

struct AssembledKernel {
  codegen::KernelSpec spec;
  std::vector<int> input_slots;
  std::vector<int> output_slots;
  std::vector<int64_t> output_offsets;
};

class KernelAssembler {
 public:
  // `slots[v]` describes value v's slot (values first, then temporaries);
  // `substitutes` maps values to the slot of a relaid-out copy.
  KernelAssembler(const LoweringGraph& graph, const FusionPlan& plan,
                  const std::vector<SlotInfo>& slots, const std::map<int, int>& substitutes);

  // The kernel of the group rooted at node `root`. For a reduction root that
  // averages its rows, `row_values_slot` receives the per-row values instead of
  // the node's result.
  AssembledKernel group(int root, int row_values_slot = -1);
  // A kernel copying slot `source` into slot `destination` (same shape).
  AssembledKernel copy(int source, int destination, const std::string& name);
  // Operand `source` of a concat written at `element_offset` into `destination`.
  AssembledKernel concat_part(int source, int destination, int64_t element_offset);
  // Every operand of a concat whose operands all have one shape, in one kernel
  // (Note [One kernel for a concat of equal parts]); `part_stride`: the
  // elements of `destination` between the starts of two consecutive parts.
  AssembledKernel concat_of_equal_parts(const std::vector<int>& sources, int destination,
                                        int64_t part_stride);
  // The mean of the `rows` values of slot `row_values` into slot `destination` (a scalar).
  AssembledKernel row_mean(int row_values, int destination, int64_t rows);

  // The layout a relaid copy of `value` needs to be readable through `map`:
  // contiguous in the order of the iteration dims the value's dims map to.
  static Layout relayout_for(const Shape& shape, const AccessMap& map);

 private:
  struct Frame;
  int value_expr(int value, const AccessMap& map);
  int leaf(int value, const AccessMap& map);
  int reduction_expr(int node_index);
  int pointwise_expr(int node_index, const AccessMap& map, std::vector<int>* all_results);
  // The coordinate along value dim `value_dim` (of size `size`) of the element
  // the kernel is at; a merged dim is a grove bug (Note [Row-major index
  // through merged dims]).
  int coordinate(const AccessMap& map, size_t value_dim, int64_t size);
  // The row-major index in `shape` of the element the kernel is at.
  int row_major_index(const AccessMap& map, const Shape& shape);
  int input_buffer(int slot, const Shape& strides);
  void add_output(int expr, int slot, const AccessMap& map, int64_t offset);
  void reset(const std::string& name, const Shape& iteration_shape);
  AssembledKernel finish();

  const LoweringGraph& graph_;
  const FusionPlan& plan_;
  const std::vector<SlotInfo>& slots_;
  const std::map<int, int>& substitutes_;

  // Per kernel under construction.
  codegen::KernelSpec spec_;
  AssembledKernel result_;
  std::map<std::pair<int, AccessMap>, int> memo_;
  std::map<std::pair<int, Shape>, int> buffers_;
  int reduction_node_ = -1;
  int reduction_result_ = -1;
  std::vector<AccessMap> reduction_operand_maps_;
  AccessMap reduction_result_map_;
  // Materialized values this kernel computes instead of loading (Note
  // [Reduction prologues]).
  std::vector<int> computed_here_;
};

// The iteration shape of a reduction node and the maps of its operands and
// result onto it (Note [Merged reduction dims]).
struct ReductionFrame {
  Shape iteration_shape;
  std::vector<AccessMap> operand_maps;
  AccessMap result_map;
};
ReductionFrame reduction_frame(const LoweringGraph& graph, const LoweringNode& node);

}  // namespace grove::compiler::lowering
