#include "compiler/reference/reference_interpreter.h"

#include "compiler/ops/op_registry.h"
#include "compiler/reference/reference_ops.h"
#include "runtime/error.h"

namespace grove::compiler::reference {

double HostTensor::at(const std::vector<int64_t>& index) const {
  GROVE_CHECK_AS(ShapeError, index.size() == shape.size(), "HostTensor::at: index of rank ",
                 index.size(), " for shape ", ir::shape_text(shape));
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    GROVE_CHECK_AS(ShapeError, index[d] >= 0 && index[d] < shape[d], "HostTensor::at: index ",
                   index[d], " out of range for dimension ", d, " of ", ir::shape_text(shape));
    flat = flat * shape[d] + index[d];
  }
  return data[static_cast<size_t>(flat)];
}

HostTensor HostTensor::scalar(double value, ir::DType dtype) {
  return HostTensor{{}, dtype, {value}};
}

HostTensorList initial_state(const ir::Program& program) {
  HostTensorList state(program.inputs().size());
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    const ir::Value& value = program.value(program.inputs()[i]);
    if (!value.initializer) continue;
    HostTensor& tensor = state[i];
    tensor.shape = value.type.shape;
    tensor.dtype = value.type.dtype;
    tensor.data = ir::initial_values(*value.initializer, value.type);
    for (double& element : tensor.data) element = round_to_dtype(element, tensor.dtype);
  }
  return state;
}

namespace {

HostTensorList run(const ir::Program& program, const HostTensorList& inputs,
                   const ReferenceOptions& options, HostTensorList* write_back) {
  GROVE_CHECK(inputs.size() == program.inputs().size(), "reference_run: program '", program.name(),
              "' takes ", program.inputs().size(), " inputs (inputs, params, ",
              "buffers in declaration order), found ", inputs.size());
  std::vector<HostTensor> values(program.values().size());
  // For each value, the program input whose storage it is (through update ops), or -1.
  std::vector<int32_t> storage_of(program.values().size(), -1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value& value = program.value(program.inputs()[i]);
    const HostTensor& tensor = inputs[i];
    GROVE_CHECK_AS(ShapeError, tensor.shape == value.type.shape,
                   "reference_run: ", ir::value_kind_name(value.kind), " '", value.name,
                   "' (position ", i, ") expects shape ", ir::shape_text(value.type.shape),
                   ", found ", ir::shape_text(tensor.shape));
    GROVE_CHECK_AS(DTypeError, tensor.dtype == value.type.dtype,
                   "reference_run: ", ir::value_kind_name(value.kind), " '", value.name,
                   "' expects dtype ", runtime::dtype_name(value.type.dtype), ", found ",
                   runtime::dtype_name(tensor.dtype));
    GROVE_CHECK_AS(ShapeError, tensor.numel() == runtime::shape_numel(tensor.shape),
                   "reference_run: ", ir::value_kind_name(value.kind), " '", value.name, "' holds ",
                   tensor.numel(), " values for shape ", ir::shape_text(tensor.shape));
    values[static_cast<size_t>(value.id)] = tensor;
    storage_of[static_cast<size_t>(value.id)] = static_cast<int32_t>(i);
  }

  const ops::OpRegistry& registry = ops::OpRegistry::global();
  for (const ir::Node& node : program.nodes()) {
    const ops::OpDef& def = registry.get(node.op);
    std::vector<const HostTensor*> operands;
    for (ir::ValueId operand : node.operands) {
      operands.push_back(&values[static_cast<size_t>(operand)]);
    }
    std::vector<ir::TensorType> result_types;
    for (ir::ValueId result : node.results) result_types.push_back(program.value(result).type);
    HostTensorList results = evaluate_node(node, operands, result_types, options);
    for (size_t r = 0; r < results.size(); ++r) {
      auto id = static_cast<size_t>(node.results[r]);
      values[id] = std::move(results[r]);
      if (def.kind == ops::OpKind::kCopyUpdate && r < def.effects.result_aliases.size() &&
          def.effects.result_aliases[r]) {
        ir::ValueId target = node.operands[static_cast<size_t>(*def.effects.result_aliases[r])];
        const ir::Value& target_value = program.value(target);
        GROVE_CHECK(
            target_value.producer < 0 ||
                registry.get(program.node(target_value.producer).op).kind != ops::OpKind::kView,
            "reference_run: node '", node.name, "' writes into '", target_value.name,
            "', a view; the reference supports in-place updates of whole values only");
        storage_of[id] = storage_of[static_cast<size_t>(target)];
        if (write_back != nullptr && storage_of[id] >= 0) {
          (*write_back)[static_cast<size_t>(storage_of[id])] = values[id];
        }
      }
    }
  }
  HostTensorList outputs;
  for (ir::ValueId output : program.outputs()) {
    outputs.push_back(values[static_cast<size_t>(output)]);
  }
  return outputs;
}

}  // namespace

HostTensorList reference_run(const ir::Program& program, const HostTensorList& inputs,
                             const ReferenceOptions& options) {
  return run(program, inputs, options, nullptr);
}

HostTensorList reference_run_in_place(const ir::Program& program, HostTensorList& inputs,
                                      const ReferenceOptions& options) {
  HostTensorList snapshot = inputs;
  return run(program, snapshot, options, &inputs);
}

}  // namespace grove::compiler::reference
