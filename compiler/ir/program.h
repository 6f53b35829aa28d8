// A Program is grove's IR: a straight-line list of Nodes over SSA Values.
//
// API summary (stable; other layers build on it):
//   Values      ValueId indexes Program::values(). A Value has a unique name, a
//               TensorType and a kind: kInput (new every call), kParam
//               (persistent, fixed address), kBuffer (persistent mutable state)
//               or kNodeResult. Params and buffers carry an Initializer.
//   Nodes       Node {name, op, operands, attrs, results}; `op` names an
//               OpDef in compiler/ops/op_registry.h, which owns every op's
//               typing, effects, graph safety, lowering hooks and gradient.
//   Call order  Program::inputs() lists every program input (inputs, params,
//               buffers) in declaration order; a lowered function takes its
//               tensors in exactly that order and returns outputs() in order.
//   Mutation    An op that mutates an operand (copy_into, sgd_momentum_update,
//               adamw_update) returns the new contents as a result that
//               aliases the operand; see Note [Mutation in SSA].
//   Building    ProgramBuilder (compiler/ir/builder.h) infers types through
//               the registry; Program::add_node takes already-typed results.
//   Checking    verify() re-derives every type and checks SSA order, names,
//               attrs and mutation rules; errors name the offending node.
//   Printing    str() prints one line per input and node.
//
// Note [Mutation in SSA]: a node that writes operand k in place produces a
// result aliasing operand k. After that node, the old value of operand k is
// dead: no later node may read it (verify() rejects that), and the program
// reads the new contents through the aliasing result. A mutated operand must
// be a param or a buffer (or a result aliasing one), so that the write lands
// in persistent state; mutating an `input` is allowed too and the tree
// manager treats it as a mutation of type (d) (docs/ARCHITECTURE.md, 4.4).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/attributes.h"
#include "compiler/ir/initializer.h"
#include "compiler/ir/tensor_type.h"

namespace grove::compiler::ir {

enum class ValueKind : uint8_t { kInput, kParam, kBuffer, kNodeResult };

const char* value_kind_name(ValueKind kind);  // "input", "param", "buffer", "result"

struct Value {
  ValueId id = kNoValue;
  std::string name;
  TensorType type;
  ValueKind kind = ValueKind::kNodeResult;
  int32_t producer = -1;                   // index of the producing node (kNodeResult)
  int32_t result_index = 0;                // which of the producer's results
  std::optional<Initializer> initializer;  // params and buffers

  bool is_program_input() const { return kind != ValueKind::kNodeResult; }
  bool is_persistent() const { return kind == ValueKind::kParam || kind == ValueKind::kBuffer; }
};

struct Node {
  std::string name;  // unique within the program; errors cite it
  std::string op;
  std::vector<ValueId> operands;
  Attributes attrs;
  std::vector<ValueId> results;
};

class Program {
 public:
  explicit Program(std::string name = "program", Device device = runtime::kCpuDevice);

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  // Named dimensions the program was instantiated with ({"batch": 1, ...}); informational.
  const std::map<std::string, int64_t>& dims() const { return dims_; }
  void set_dims(std::map<std::string, int64_t> dims) { dims_ = std::move(dims); }

  // Declares a program input. Params and buffers need an initializer; inputs
  // must not have one. Throws grove::Error on a duplicate name.
  ValueId add_input(const std::string& name, TensorType type, ValueKind kind,
                    std::optional<Initializer> initializer = std::nullopt);
  // Appends a node whose results have the given names and types (one each).
  // Does not type-check: ProgramBuilder and verify() do. Returns the node index.
  int32_t add_node(const std::string& name, const std::string& op, std::vector<ValueId> operands,
                   Attributes attrs, const std::vector<std::string>& result_names,
                   const std::vector<TensorType>& result_types);
  void add_output(ValueId value);
  void set_outputs(std::vector<ValueId> outputs);

  const std::vector<Value>& values() const { return values_; }
  const Value& value(ValueId id) const;
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int32_t index) const;
  // Every program input in call order (kInput, kParam and kBuffer interleaved
  // as declared).
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  // The program inputs of one kind, in call order.
  std::vector<ValueId> inputs_of_kind(ValueKind kind) const;
  // Position of `value` in inputs(), or -1.
  int32_t input_position(ValueId value) const;

  std::optional<ValueId> find_value(const std::string& name) const;
  std::optional<int32_t> find_node(const std::string& name) const;
  bool has_name(const std::string& name) const;

  // One line per input, node and the outputs:
  //   param %w0: f32[512, 512]@sim:0 = normal(mean=0, std=0.02, seed=1)
  //   %h0 = linear(%x, %w0, %b0) {} : f32[1, 512]   # fc0
  std::string str() const;

  // Checks every invariant (see the .cc); throws grove::Error (ShapeError or
  // DTypeError for typing failures) naming the offending node and operand.
  void verify() const;

  // Structural equality (names, types, kinds, initializers, nodes, outputs).
  friend bool operator==(const Program& a, const Program& b);

 private:
  ValueId add_value(Value value);

  std::string name_;
  Device device_;
  std::map<std::string, int64_t> dims_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::map<std::string, ValueId> value_by_name_;
  std::map<std::string, int32_t> node_by_name_;
};

}  // namespace grove::compiler::ir
