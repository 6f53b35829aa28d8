#include "compiler/ir/program_inputs.h"

namespace grove::compiler::ir {

Program program_with_inputs_of(const Program& from, std::vector<ValueId>& ids) {
  Program result(from.name(), from.device());
  result.set_dims(from.dims());
  ids.assign(from.values().size(), kNoValue);
  for (ValueId id : from.inputs()) {
    const Value& value = from.value(id);
    ids[static_cast<size_t>(id)] =
        result.add_input(value.name, value.type, value.kind, value.initializer);
  }
  return result;
}

}  // namespace grove::compiler::ir
