// The float64 definition of every op, used by the reference interpreter.
// Internal to compiler/reference.
#pragma once

#include <vector>

#include "compiler/ir/program.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/dtype.h"

namespace grove::compiler::reference {

// Evaluates one node on its operands; returns one HostTensor per result, with
// the result types' shapes and dtypes (dynamic dims resolved).
HostTensorList evaluate_node(const ir::Node& node, const std::vector<const HostTensor*>& operands,
                             const std::vector<ir::TensorType>& result_types,
                             const ReferenceOptions& options);

// Rounds `value` as storing it in `dtype` would (runtime/dtype.h).
using runtime::round_to_dtype;

}  // namespace grove::compiler::reference
