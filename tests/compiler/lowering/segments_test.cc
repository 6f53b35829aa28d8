// Segment metadata of lowered functions: capturable runs split around host
// work, static / mutated inputs, output aliases, and layout helpers.
#include <gtest/gtest.h>

#include "compiler/ir/builder.h"
#include "compiler/lowering/layout.h"
#include "compiler/lowering/lower.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::CaptureBlocker;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::kSimDevice;

compiler::ir::Program nonzero_in_the_middle() {
  ProgramBuilder b("piecewise", kSimDevice);
  ValueId x = b.input("x", {4, 4});
  ValueId squared = b.mul(x, x, "square");
  ValueId mask = b.compare("gt", squared, b.full(1.0), "big");
  ValueId indices = b.nonzero(mask, "where_big");
  ValueId exps = b.exp(squared, "exps");
  b.output(indices);
  b.output(exps);
  return b.build();
}

TEST(Segments, NonzeroInTheMiddleSplitsCapturedEagerCaptured) {
  compiler::ir::Program program = nonzero_in_the_middle();
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
  const compiler::LoweredFunction& function = lowered.function();
  ASSERT_EQ(function.segments.size(), 3u) << lowered.describe();
  EXPECT_TRUE(function.segments[0].capturable());
  EXPECT_EQ(function.segments[0].kernel_count, 2u);  // square, big
  EXPECT_FALSE(function.segments[1].capturable());
  EXPECT_EQ(function.segments[1].blocker, CaptureBlocker::kNeedsHostSync);
  EXPECT_EQ(function.segments[1].op, "nonzero");
  EXPECT_EQ(function.segments[1].node_name, "where_big");
  EXPECT_EQ(function.segments[1].kernel_count, 0u);
  EXPECT_TRUE(function.segments[2].capturable());
  EXPECT_EQ(function.segments[2].kernel_count, 1u);  // exps

  const auto& segments = lowered.segments();
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].input_names, std::vector<std::string>({"x"}));
  EXPECT_EQ(segments[0].output_names, std::vector<std::string>({"square", "big"}));
  EXPECT_EQ(segments[1].input_names, std::vector<std::string>({"big"}));
  EXPECT_EQ(segments[1].output_names, std::vector<std::string>({"where_big"}));
  EXPECT_EQ(segments[2].input_names, std::vector<std::string>({"square"}));
  EXPECT_EQ(segments[2].output_names, std::vector<std::string>({"exps"}));
  for (const auto& segment : segments) EXPECT_EQ(segment.function.segments.size(), 1u);

  // Running the segments one by one through run_with gives the reference's results.
  testing::HostTensorList inputs = testing::random_inputs(nonzero_in_the_middle(), 99);
  testing::HostTensorList expected = compiler::reference::reference_run(program, inputs);
  std::vector<compiler::Callable> calls;
  int calls_made = 0;
  for (const auto& segment : segments) {
    calls.push_back([&calls_made, call = segment.function.call](const compiler::TensorList& in) {
      ++calls_made;
      return call(in);
    });
  }
  compiler::TensorList outputs =
      lowered.run_with(calls, {testing::to_device(inputs[0], kSimDevice)});
  EXPECT_EQ(calls_made, 3);
  for (size_t o = 0; o < outputs.size(); ++o) {
    std::string why;
    EXPECT_TRUE(testing::all_close(testing::to_host(outputs[o]), expected[o], {1e-5, 1e-6}, &why))
        << "output " << o << ": " << why;
  }
}

TEST(Segments, PrintIsAHostOnlySegmentNamedAfterItsNode) {
  ProgramBuilder b("printing", kSimDevice);
  ValueId x = b.input("x", {3});
  ValueId shown = b.print(b.exp(x), "exp of x", "show");
  b.output(b.add(shown, x));
  compiler::ir::Program program = b.build();
  std::vector<std::string> printed;
  compiler::lowering::LowerOptions options;
  options.print_sink = [&](const std::string& text) { printed.push_back(text); };
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program, options);
  ASSERT_EQ(lowered.function().segments.size(), 3u) << lowered.describe();
  EXPECT_EQ(lowered.function().segments[1].blocker, CaptureBlocker::kHostOnly);
  EXPECT_EQ(lowered.function().segments[1].op, "print");
  EXPECT_EQ(lowered.function().segments[1].node_name, "show");
  runtime::Tensor input =
      runtime::Tensor::from_vector(std::vector<float>{0, 1, 2}, {3}, kSimDevice);
  lowered.function().call({input});
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_EQ(printed[0].rfind("exp of x: f32[3] [1, 2.71", 0), 0u) << printed[0];
}

TEST(Segments, MetadataNamesStaticMutatedAndAliasedInputs) {
  ProgramBuilder b("state", kSimDevice);
  ValueId x = b.input("x", {2, 3});
  ValueId w = b.param("w", {2, 3}, DType::kF32, compiler::ir::normal_init(1.0, 3));
  ValueId cache = b.buffer("cache", {2, 3}, DType::kF32, compiler::ir::zeros_init());
  b.output(b.copy_into(cache, b.exp(x), "store"));
  b.output(b.transpose(w, 0, 1, "w_t"));
  b.output(b.add(x, w, "sum"));
  compiler::ir::Program program = b.build();
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
  const compiler::LoweredFunction& function = lowered.function();
  EXPECT_EQ(function.static_input_indices, std::vector<size_t>({1, 2}));
  EXPECT_EQ(function.mutated_input_indices, std::vector<size_t>({2}));
  ASSERT_EQ(function.output_aliases_input.size(), 3u);
  EXPECT_EQ(function.output_aliases_input[0], std::optional<size_t>(2));
  EXPECT_EQ(function.output_aliases_input[1], std::optional<size_t>(1));
  EXPECT_EQ(function.output_aliases_input[2], std::nullopt);
  EXPECT_EQ(function.devices, std::vector<runtime::Device>({kSimDevice}));
  const compiler::LoweredFunction& segment = lowered.segments().at(0).function;
  EXPECT_EQ(segment.mutated_input_indices.size(), 1u);

  testing::HostTensorList inputs = testing::random_inputs(program, 5);
  testing::expect_matches_reference(program, inputs, kSimDevice, {1e-5, 1e-6}, "state");
}

// Regression: gpt4x256's training forward returned logits[:, :-1], a strided
// view, as a saved activation; its backward refused the non-contiguous input.
TEST(Segments, StridedViewsOfComputedValuesAreReturnedContiguous) {
  ProgramBuilder b("views", kSimDevice);
  ValueId x = b.input("x", {2, 4, 3});
  ValueId e = b.exp(x, "e");
  b.output(b.slice(e, 1, 0, 3, "head"));
  b.output(b.transpose(e, 0, 2, "flipped"));
  compiler::ir::Program program = b.build();
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
  const compiler::LoweredFunction& function = lowered.function();
  EXPECT_EQ(function.output_aliases_input,
            (std::vector<std::optional<size_t>>{std::nullopt, std::nullopt}));
  testing::HostTensorList inputs = testing::random_inputs(program, 11);
  compiler::TensorList outputs = function.call({testing::to_device(inputs[0], kSimDevice)});
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(outputs[0].is_contiguous()) << runtime::shape_str(outputs[0].strides());
  EXPECT_TRUE(outputs[1].is_contiguous()) << runtime::shape_str(outputs[1].strides());
  EXPECT_EQ(outputs[0].shape(), (runtime::Shape{2, 3, 3}));
  EXPECT_EQ(outputs[1].shape(), (runtime::Shape{3, 4, 2}));
  testing::expect_matches_reference(program, inputs, kSimDevice, {1e-5, 1e-6}, "views");
}

TEST(Segments, CallErrorsNameTheInput) {
  compiler::ir::Program program = nonzero_in_the_middle();
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
  auto message = [&](const compiler::TensorList& inputs) {
    try {
      lowered.function().call(inputs);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("expected 1 inputs"), std::string::npos);
  runtime::Tensor wrong_shape = runtime::Tensor::empty({4, 5}, DType::kF32, kSimDevice);
  EXPECT_NE(message({wrong_shape}).find("input 'x' (input 0) expects shape [4, 4]"),
            std::string::npos)
      << message({wrong_shape});
}

// Note [Strided inputs] (lower.h): a per-call input of any layout runs on its
// contiguous copy; a param or an input the program writes must be contiguous.
TEST(Lowering, ExpandedAndTransposedInputsGiveTheContiguousResults) {
  ProgramBuilder b("layouts", kSimDevice);
  ValueId x = b.input("x", {4, 3});
  ValueId w = b.param("w", {4, 3}, DType::kF32, compiler::ir::normal_init(1.0, 3));
  ValueId cache = b.buffer("cache", {4, 3}, DType::kF32, compiler::ir::zeros_init());
  b.output(b.add(b.exp(x), w, "sum"));
  b.output(b.copy_into(cache, x, "store"));
  compiler::ir::Program program = b.build();
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
  const compiler::LoweredFunction& function = lowered.function();
  testing::HostTensorList host = testing::random_inputs(program, 17);
  runtime::Tensor w_tensor = testing::to_device(host[1], kSimDevice);
  runtime::Tensor cache_tensor = testing::to_device(host[2], kSimDevice);
  runtime::Tensor row =
      runtime::Tensor::from_vector(std::vector<float>{0.5f, -1.0f, 2.0f}, {1, 3}, kSimDevice);
  runtime::Tensor wide =
      testing::to_device(testing::random_inputs(program, 18)[0], kSimDevice).view({3, 4});
  for (runtime::Tensor strided : {row.expand({4, 3}), wide.transpose(0, 1)}) {
    ASSERT_FALSE(strided.is_contiguous());
    runtime::Tensor copy =
        runtime::Tensor::from_vector(strided.to_vector<float>(), {4, 3}, kSimDevice);
    std::vector<float> expected =
        function.call({copy, w_tensor, cache_tensor})[0].to_vector<float>();
    std::vector<float> got = function.call({strided, w_tensor, cache_tensor})[0].to_vector<float>();
    EXPECT_EQ(got, expected) << runtime::shape_str(strided.strides());
    EXPECT_EQ(cache_tensor.to_vector<float>(), copy.to_vector<float>());  // the store ran
  }
  auto message = [&](const compiler::TensorList& inputs) {
    try {
      function.call(inputs);
    } catch (const ShapeError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  runtime::Tensor w_transposed =
      runtime::Tensor::from_vector(w_tensor.to_vector<float>(), {3, 4}, kSimDevice).transpose(0, 1);
  std::string refused = message({row.expand({4, 3}), w_transposed, cache_tensor});
  EXPECT_NE(refused.find("param 'w'"), std::string::npos) << refused;
  EXPECT_NE(refused.find("must be contiguous"), std::string::npos) << refused;
}

TEST(Layouts, ViewStridesFollowMemoryAndRefuseIncompatibleReshapes) {
  using compiler::lowering::view_strides;
  EXPECT_EQ(view_strides({2, 3, 4}, {12, 4, 1}, {6, 4}), runtime::Shape({4, 1}));
  EXPECT_EQ(view_strides({2, 3, 4}, {12, 4, 1}, {2, 12}), runtime::Shape({12, 1}));
  // A transposed matrix cannot be flattened without a copy.
  EXPECT_EQ(view_strides({3, 2}, {1, 3}, {6}), std::nullopt);
  // Splitting a strided dim keeps its stride.
  EXPECT_EQ(view_strides({4, 3}, {1, 4}, {2, 2, 3}), runtime::Shape({2, 1, 4}));
  EXPECT_EQ(view_strides({1, 32, 256}, {8192, 256, 1}, {1, 32, 4, 64}),
            runtime::Shape({8192, 256, 64, 1}));
}

}  // namespace
}  // namespace grove
