// Note [Grouped-query keys read whole] (compiler/lowering/grouped_attention_keys.h):
// attention over key and value heads repeated as the importer writes HF's
// repeat_kv (unsqueeze, x + zeros, reshape) reads the unrepeated heads; the
// repeats go, the program verifies, lowers to fewer kernels and matches the
// reference; repeats read elsewhere stay, and a lone repeated key is left alone.
#include "compiler/lowering/grouped_attention_keys.h"

#include <gtest/gtest.h>

#include <string>

#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "tests/common/test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::ir::Program;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;

size_t count_op(const Program& program, const std::string& op) {
  size_t count = 0;
  for (const compiler::ir::Node& node : program.nodes()) count += node.op == op ? 1 : 0;
  return count;
}

// x [2, 2, 8, 16] repeated to [2, 4, 8, 16] as the importer writes repeat_kv.
ValueId repeat_heads(ProgramBuilder& b, ValueId x) {
  ValueId unsqueezed = b.reshape(x, {2, 2, 1, 8, 16});
  ValueId expanded = b.add(unsqueezed, b.full(0.0, {2, 2, 2, 8, 16}));
  return b.reshape(expanded, {2, 4, 8, 16});
}

// Attention of 4 query heads over 2 key heads; `repeat_value` false leaves the
// value with 4 heads of its own; `keep_key` also outputs the repeated key.
Program grouped_attention(bool repeat_value = true, bool keep_key = false) {
  ProgramBuilder b("gqa", runtime::kSimDevice);
  ValueId q = b.input("q", {2, 4, 8, 16});
  ValueId k = b.input("k", {2, 2, 8, 16});
  ValueId v = repeat_value ? b.input("v", {2, 2, 8, 16}) : b.input("v", {2, 4, 8, 16});
  ValueId key = repeat_heads(b, k);
  ValueId value = repeat_value ? repeat_heads(b, v) : v;
  b.output(b.op1("attention", {q, key, value}, {{"scale", 0.25}, {"causal", int64_t{1}}}));
  if (keep_key) b.output(key);
  return b.build();
}

TEST(GroupedAttentionKeys, AttentionReadsTheHeadsBeforeTheirRepeat) {
  Program program = grouped_attention();
  std::optional<Program> rewritten = compiler::lowering::read_grouped_attention_keys(program);
  ASSERT_TRUE(rewritten.has_value());
  rewritten->verify();
  EXPECT_EQ(count_op(*rewritten, "add"), 0u) << rewritten->str();
  EXPECT_EQ(count_op(*rewritten, "full"), 0u) << rewritten->str();
  EXPECT_EQ(rewritten->inputs().size(), program.inputs().size());
  const compiler::ir::Node& attention = rewritten->nodes().back();
  ASSERT_EQ(attention.op, "attention");
  EXPECT_EQ(attention.operands[1], rewritten->inputs()[1]);  // k itself
  EXPECT_EQ(attention.operands[2], rewritten->inputs()[2]);  // v itself

  size_t kernels_with_repeats = 0;
  {
    testing::ScopedEnv off("GROVE_GROUPED_ATTENTION_KEYS", "0");
    kernels_with_repeats = compiler::lowering::lower(program).kernel_report().kernels.size();
  }
  EXPECT_LT(compiler::lowering::lower(program).kernel_report().kernels.size(),
            kernels_with_repeats);
  testing::expect_matches_reference(program, testing::random_inputs(program, 7),
                                    runtime::kSimDevice,
                                    testing::tolerance_for(runtime::DType::kF32), "gqa");
}

TEST(GroupedAttentionKeys, ARepeatReadElsewhereStays) {
  std::optional<Program> rewritten =
      compiler::lowering::read_grouped_attention_keys(grouped_attention(true, true));
  ASSERT_TRUE(rewritten.has_value());
  rewritten->verify();
  EXPECT_EQ(count_op(*rewritten, "add"), 1u) << rewritten->str();  // the output's repeat
}

TEST(GroupedAttentionKeys, ALoneRepeatedKeyIsLeftAlone) {
  EXPECT_FALSE(
      compiler::lowering::read_grouped_attention_keys(grouped_attention(false)).has_value());
}

TEST(GroupedAttentionKeys, BadSwitchValueIsRefusedByName) {
  testing::ScopedEnv bad("GROVE_GROUPED_ATTENTION_KEYS", "yes");
  try {
    compiler::lowering::grouped_attention_keys_enabled();
    FAIL() << "GROVE_GROUPED_ATTENTION_KEYS=yes was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("GROVE_GROUPED_ATTENTION_KEYS"), std::string::npos);
  }
}

}  // namespace
}  // namespace grove
