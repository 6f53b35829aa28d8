#include "compiler/ir/program.h"

#include <sstream>

#include "runtime/error.h"

namespace grove::compiler::ir {

const char* value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::kInput:
      return "input";
    case ValueKind::kParam:
      return "param";
    case ValueKind::kBuffer:
      return "buffer";
    case ValueKind::kNodeResult:
      return "result";
  }
  return "?";
}

Program::Program(std::string name, Device device) : name_(std::move(name)), device_(device) {}

ValueId Program::add_value(Value value) {
  GROVE_CHECK(!value.name.empty(), "program '", name_, "': a value needs a non-empty name");
  GROVE_CHECK(value_by_name_.count(value.name) == 0, "program '", name_, "': value name '",
              value.name, "' is already defined; give each input and node result a unique name");
  value.id = static_cast<ValueId>(values_.size());
  value_by_name_[value.name] = value.id;
  values_.push_back(std::move(value));
  return values_.back().id;
}

ValueId Program::add_input(const std::string& name, TensorType type, ValueKind kind,
                           std::optional<Initializer> initializer) {
  GROVE_CHECK(kind != ValueKind::kNodeResult, "program input '", name,
              "' must be an input, param or buffer");
  bool persistent = kind == ValueKind::kParam || kind == ValueKind::kBuffer;
  GROVE_CHECK(persistent == initializer.has_value(), "program input '", name, "' (",
              value_kind_name(kind), ") ",
              persistent ? "needs an initializer" : "must not have an initializer");
  Value value;
  value.name = name;
  value.type = std::move(type);
  value.kind = kind;
  value.initializer = std::move(initializer);
  ValueId id = add_value(std::move(value));
  inputs_.push_back(id);
  return id;
}

int32_t Program::add_node(const std::string& name, const std::string& op,
                          std::vector<ValueId> operands, Attributes attrs,
                          const std::vector<std::string>& result_names,
                          const std::vector<TensorType>& result_types) {
  GROVE_CHECK(!name.empty(), "program '", name_, "': a node of op '", op, "' needs a name");
  GROVE_CHECK(node_by_name_.count(name) == 0, "program '", name_, "': node name '", name,
              "' is already used; give each node a unique name");
  GROVE_CHECK(result_names.size() == result_types.size(), "node '", name,
              "': ", result_names.size(), " result names for ", result_types.size(),
              " result types");
  for (ValueId operand : operands) {
    GROVE_CHECK(operand >= 0 && operand < static_cast<ValueId>(values_.size()), "node '", name,
                "': operand id ", operand, " is not a value of program '", name_, "'");
  }
  auto index = static_cast<int32_t>(nodes_.size());
  Node node;
  node.name = name;
  node.op = op;
  node.operands = std::move(operands);
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < result_names.size(); ++i) {
    Value value;
    value.name = result_names[i];
    value.type = result_types[i];
    value.producer = index;
    value.result_index = static_cast<int32_t>(i);
    node.results.push_back(add_value(std::move(value)));
  }
  node_by_name_[name] = index;
  nodes_.push_back(std::move(node));
  return index;
}

void Program::add_output(ValueId value) {
  GROVE_CHECK(value >= 0 && value < static_cast<ValueId>(values_.size()), "program '", name_,
              "': output id ", value, " is not a value of the program");
  outputs_.push_back(value);
}

void Program::set_outputs(std::vector<ValueId> outputs) {
  outputs_.clear();
  for (ValueId value : outputs) add_output(value);
}

const Value& Program::value(ValueId id) const {
  GROVE_CHECK(id >= 0 && id < static_cast<ValueId>(values_.size()), "program '", name_,
              "': value id ", id, " out of range [0, ", values_.size(), ")");
  return values_[static_cast<size_t>(id)];
}

const Node& Program::node(int32_t index) const {
  GROVE_CHECK(index >= 0 && index < static_cast<int32_t>(nodes_.size()), "program '", name_,
              "': node index ", index, " out of range [0, ", nodes_.size(), ")");
  return nodes_[static_cast<size_t>(index)];
}

std::vector<ValueId> Program::inputs_of_kind(ValueKind kind) const {
  std::vector<ValueId> ids;
  for (ValueId id : inputs_) {
    if (values_[static_cast<size_t>(id)].kind == kind) ids.push_back(id);
  }
  return ids;
}

int32_t Program::input_position(ValueId value) const {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i] == value) return static_cast<int32_t>(i);
  }
  return -1;
}

std::optional<ValueId> Program::find_value(const std::string& name) const {
  auto found = value_by_name_.find(name);
  if (found == value_by_name_.end()) return std::nullopt;
  return found->second;
}

std::optional<int32_t> Program::find_node(const std::string& name) const {
  auto found = node_by_name_.find(name);
  if (found == node_by_name_.end()) return std::nullopt;
  return found->second;
}

bool Program::has_name(const std::string& name) const { return value_by_name_.count(name) != 0; }

std::string Program::str() const {
  std::ostringstream stream;
  stream << "program " << name_ << " @" << device_.str();
  if (!dims_.empty()) {
    stream << " dims {";
    bool first = true;
    for (const auto& [dim, size] : dims_) {
      stream << (first ? "" : ", ") << dim << "=" << size;
      first = false;
    }
    stream << "}";
  }
  stream << "\n";
  for (ValueId id : inputs_) {
    const Value& value = values_[static_cast<size_t>(id)];
    stream << "  " << value_kind_name(value.kind) << " %" << value.name << ": " << value.type.str();
    if (value.initializer) stream << " = " << value.initializer->str();
    stream << "\n";
  }
  for (const Node& node : nodes_) {
    stream << "  ";
    for (size_t i = 0; i < node.results.size(); ++i) {
      stream << (i ? ", " : "") << "%" << values_[static_cast<size_t>(node.results[i])].name;
    }
    stream << (node.results.empty() ? "" : " = ") << node.op << "(";
    for (size_t i = 0; i < node.operands.size(); ++i) {
      stream << (i ? ", " : "") << "%" << values_[static_cast<size_t>(node.operands[i])].name;
    }
    stream << ")";
    if (!node.attrs.empty()) stream << " " << node.attrs.str();
    stream << " :";
    for (size_t i = 0; i < node.results.size(); ++i) {
      const TensorType& type = values_[static_cast<size_t>(node.results[i])].type;
      stream << (i ? ", " : " ") << runtime::dtype_name(type.dtype) << shape_text(type.shape);
    }
    stream << "  # " << node.name << "\n";
  }
  stream << "  return";
  for (size_t i = 0; i < outputs_.size(); ++i) {
    stream << (i ? ", " : " ") << "%" << values_[static_cast<size_t>(outputs_[i])].name;
  }
  stream << "\n";
  return stream.str();
}

bool operator==(const Program& a, const Program& b) {
  if (a.name_ != b.name_ || a.device_ != b.device_ || a.inputs_ != b.inputs_ ||
      a.outputs_ != b.outputs_ || a.values_.size() != b.values_.size() ||
      a.nodes_.size() != b.nodes_.size()) {
    return false;
  }
  for (size_t i = 0; i < a.values_.size(); ++i) {
    const Value& x = a.values_[i];
    const Value& y = b.values_[i];
    if (x.name != y.name || !(x.type == y.type) || x.kind != y.kind || x.producer != y.producer ||
        x.result_index != y.result_index || x.initializer != y.initializer) {
      return false;
    }
  }
  for (size_t i = 0; i < a.nodes_.size(); ++i) {
    const Node& x = a.nodes_[i];
    const Node& y = b.nodes_[i];
    if (x.name != y.name || x.op != y.op || x.operands != y.operands || !(x.attrs == y.attrs) ||
        x.results != y.results) {
      return false;
    }
  }
  return true;
}

}  // namespace grove::compiler::ir
