#include <gtest/gtest.h>

#include <cmath>

#include "compiler/ir/builder.h"
#include "compiler/ir/program.h"
#include "runtime/error.h"

namespace grove::compiler::ir {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Program small_mlp() {
  ProgramBuilder b("mlp", runtime::kSimDevice);
  ValueId x = b.input("x", {4, 8});
  ValueId w = b.param("fc.weight", {16, 8}, DType::kF32, normal_init(0.1, 1));
  ValueId bias = b.param("fc.bias", {16}, DType::kF32, zeros_init());
  ValueId h = b.gelu(b.linear(x, w, bias, "fc"), "act");
  b.output(b.sum(h, {1}, true, "total"));
  return b.build();
}

TEST(ProgramBuilder, InfersTypesAndNamesNodes) {
  Program program = small_mlp();
  ASSERT_EQ(program.nodes().size(), 3u);
  EXPECT_EQ(program.nodes()[0].name, "fc");
  EXPECT_EQ(program.nodes()[0].op, "linear");
  const Value& out = program.value(program.outputs()[0]);
  EXPECT_EQ(out.type, (TensorType{{4, 1}, DType::kF32, runtime::kSimDevice}));
  EXPECT_EQ(program.inputs().size(), 3u);
  EXPECT_EQ(program.inputs_of_kind(ValueKind::kParam).size(), 2u);
  EXPECT_EQ(program.input_position(*program.find_value("fc.bias")), 2);
  // Defaults are filled in when the node is built.
  EXPECT_EQ(program.nodes()[2].attrs.get_int("keepdim"), 1);
}

TEST(ProgramBuilder, NamesUnnamedNodesByOp) {
  ProgramBuilder b;
  ValueId x = b.input("x", {3});
  ValueId y = b.relu(b.neg(x));
  b.output(y);
  Program program = b.build();
  EXPECT_EQ(program.nodes()[0].name, "neg_0");
  EXPECT_EQ(program.nodes()[1].name, "relu_1");
}

TEST(ProgramBuilder, ShapeErrorAtTheCallNamesNodeAndOperands) {
  ProgramBuilder b;
  ValueId x = b.input("x", {2, 3});
  ValueId y = b.input("y", {3, 2});
  try {
    b.add(x, y, "bad_add");
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& error) {
    std::string message = error.what();
    EXPECT_TRUE(contains(message, "node 'bad_add' (add)")) << message;
    EXPECT_TRUE(contains(message, "'x' f32[2, 3]")) << message;
    EXPECT_TRUE(contains(message, "'y' f32[3, 2]")) << message;
  }
}

TEST(ProgramBuilder, MultiResultOpsGetIndexedNames) {
  ProgramBuilder b;
  ValueId p = b.param("p", {4}, DType::kF32, ones_init());
  ValueId g = b.input("g", {4});
  ValueId buf = b.buffer("buf", {4}, DType::kF32, zeros_init());
  ValueId lr = b.input("lr", {});
  ValueId momentum = b.input("momentum", {});
  ValueId decay = b.input("decay", {});
  std::vector<ValueId> results = b.sgd_momentum_update(p, g, buf, lr, momentum, decay, "step");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(b.program().value(results[0]).name, "step.0");
  EXPECT_EQ(b.program().value(results[1]).name, "step.1");
}

TEST(Program, PrinterShowsInputsNodesAndOutputs) {
  std::string text = small_mlp().str();
  EXPECT_TRUE(contains(text, "program mlp @sim:0")) << text;
  EXPECT_TRUE(
      contains(text, "param %fc.weight: f32[16, 8]@sim:0 = normal(mean=0, std=0.1, seed=1)"))
      << text;
  EXPECT_TRUE(contains(text, "%fc = linear(%x, %fc.weight, %fc.bias) : f32[4, 16]  # fc")) << text;
  EXPECT_TRUE(contains(text, "%total = sum(%act) {dims=[1], keepdim=1} : f32[4, 1]")) << text;
  EXPECT_TRUE(contains(text, "return %total")) << text;
}

TEST(Program, RejectsDuplicateNamesAndMisplacedInitializers) {
  Program program("p");
  program.add_input("x", TensorType{{2}, DType::kF32, {}}, ValueKind::kInput);
  EXPECT_THROW(program.add_input("x", TensorType{{2}, DType::kF32, {}}, ValueKind::kInput), Error);
  EXPECT_THROW(program.add_input("w", TensorType{{2}, DType::kF32, {}}, ValueKind::kParam), Error);
  EXPECT_THROW(
      program.add_input("i", TensorType{{2}, DType::kF32, {}}, ValueKind::kInput, zeros_init()),
      Error);
}

TEST(ProgramVerify, ReportsWrongRecordedTypeByNode) {
  Program program("p");
  ValueId x = program.add_input("x", TensorType{{2, 3}, DType::kF32, {}}, ValueKind::kInput);
  program.add_node("double_it", "add", {x, x}, {}, {"y"}, {TensorType{{3, 2}, DType::kF32, {}}});
  try {
    program.verify();
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& error) {
    EXPECT_TRUE(contains(error.what(), "node 'double_it' (add)")) << error.what();
    EXPECT_TRUE(contains(error.what(), "f32[2, 3]")) << error.what();
  }
}

TEST(ProgramVerify, ReportsUnknownOpAndBadAttributesByNode) {
  Program program("p");
  ValueId x = program.add_input("x", TensorType{{2}, DType::kF32, {}}, ValueKind::kInput);
  program.add_node("mystery", "not_an_op", {x}, {}, {"y"}, {TensorType{{2}, DType::kF32, {}}});
  EXPECT_THROW(
      {
        try {
          program.verify();
        } catch (const Error& error) {
          EXPECT_TRUE(contains(error.what(), "node 'mystery'")) << error.what();
          throw;
        }
      },
      Error);

  Program attrs("q");
  ValueId z = attrs.add_input("z", TensorType{{2, 2}, DType::kF32, {}}, ValueKind::kInput);
  attrs.add_node("sm", "softmax", {z}, {{"dim", std::string("last")}}, {"s"},
                 {TensorType{{2, 2}, DType::kF32, {}}});
  try {
    attrs.verify();
    FAIL() << "expected an attribute error";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "node 'sm' (softmax)")) << error.what();
    EXPECT_TRUE(contains(error.what(), "attribute 'dim'")) << error.what();
  }
}

TEST(ProgramVerify, RejectsReadingAValueAfterItWasMutatedInPlace) {
  ProgramBuilder b;
  ValueId state = b.buffer("state", {3}, DType::kF32, zeros_init());
  ValueId x = b.input("x", {3});
  ValueId updated = b.copy_into(state, x, "write");
  b.output(b.add(state, x, "stale_read"));  // reads the overwritten value
  b.output(updated);
  try {
    b.build();
    FAIL() << "expected a mutation error";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "node 'stale_read'")) << error.what();
    EXPECT_TRUE(contains(error.what(), "overwritten in place")) << error.what();
  }
}

TEST(ProgramVerify, RejectsProgramInputOnAnotherDevice) {
  Program program("p", runtime::kSimDevice);
  program.add_input("x", TensorType{{2}, DType::kF32, runtime::kCpuDevice}, ValueKind::kInput);
  EXPECT_THROW(program.verify(), Error);
}

TEST(Initializer, IsSeededAndReproducible) {
  TensorType type{{64, 64}, DType::kF32, {}};
  std::vector<double> a = initial_values(normal_init(0.5, 7), type);
  std::vector<double> again = initial_values(normal_init(0.5, 7), type);
  std::vector<double> other = initial_values(normal_init(0.5, 8), type);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, other);
  double mean = 0, square = 0;
  for (double v : a) mean += v, square += v * v;
  mean /= static_cast<double>(a.size());
  double std = std::sqrt(square / static_cast<double>(a.size()) - mean * mean);
  EXPECT_NEAR(mean, 0, 0.03);
  EXPECT_NEAR(std, 0.5, 0.03);

  std::vector<double> uniform = initial_values(uniform_init(-2, 3, 1), type);
  for (double v : uniform) ASSERT_TRUE(v >= -2 && v < 3) << v;

  std::vector<double> tril = initial_values(tril_init(), TensorType{{2, 3, 3}, DType::kBool, {}});
  std::vector<double> expected = {1, 0, 0, 1, 1, 0, 1, 1, 1};
  expected.insert(expected.end(), expected.begin(), expected.end());
  EXPECT_EQ(tril, expected);
}

}  // namespace
}  // namespace grove::compiler::ir
