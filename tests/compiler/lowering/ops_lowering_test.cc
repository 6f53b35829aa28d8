// Every op lowered on sim against the float64 reference, on random seeded
// inputs, in f32 and bf16 (where the op takes floats).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "compiler/codegen/kernel_builder.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/kernel_assembly.h"
#include "compiler/lowering/lower.h"
#include "compiler/lowering/scheduler.h"
#include "compiler/ops/op_registry.h"
#include "runtime/device_context.h"
#include "tests/common/test_util.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using testing::InputRanges;

constexpr runtime::Device kSim = runtime::kSimDevice;

struct OpCase {
  std::string label;
  std::vector<std::string> ops;  // ops the case covers
  std::function<void(ProgramBuilder&, DType)> build;
  InputRanges ranges;
  bool floats_only = true;  // runs in f32 and bf16; false: dtype ignored (f32 once)
};

ValueId in(ProgramBuilder& b, const std::string& name, const runtime::Shape& shape, DType dtype) {
  return b.input(name, shape, dtype);
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  auto unary = [&](const std::string& op, double low, double high) {
    OpCase c{"unary_" + op, {op}, [op](ProgramBuilder& b, DType t) {
               b.output(b.op1(op, {in(b, "x", {3, 5}, t)}));
             }};
    c.ranges.float_low = low;
    c.ranges.float_high = high;
    cases.push_back(c);
  };
  for (const char* op : {"neg", "exp", "tanh", "sigmoid", "relu", "gelu", "erf"}) unary(op, -2, 2);
  for (const char* op : {"log", "sqrt", "rsqrt"}) unary(op, 0.2, 3);
  for (const char* op : {"sin", "cos"}) unary(op, -40, 40);
  for (const char* op : {"atan", "floor", "ceil", "round", "trunc"}) unary(op, -5, 5);
  unary("log1p", -0.9, 3);
  unary("expm1", -3, 3);
  for (const char* op : {"maximum", "minimum"}) {
    std::string name = op;
    cases.push_back({"binary_broadcast_" + name, {name}, [name](ProgramBuilder& b, DType t) {
                       ValueId x = in(b, "x", {2, 3, 4}, t);
                       b.output(b.op1(name, {x, in(b, "y", {3, 1}, t)}));
                     }});
  }
  OpCase bitwise{
      "bitwise",
      {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "floor_divide", "remainder",
       "truncate_divide", "fmod"},
      [](ProgramBuilder& b, DType) {
        for (DType t : {DType::kI64, DType::kI32}) {
          ValueId x = in(b, std::string("x") + runtime::dtype_name(t), {3, 4}, t);
          ValueId y = in(b, std::string("y") + runtime::dtype_name(t), {4}, t);
          b.output(b.op1("bitwise_and", {x, y}));
          b.output(b.op1("bitwise_or", {x, y}));
          b.output(b.op1("bitwise_xor", {x, y}));
          b.output(b.op1("bitwise_not", {x}));
          for (const char* op : {"floor_divide", "remainder", "truncate_divide", "fmod"}) {
            b.output(b.op1(op, {x, y}));  // y holds zeros: they divide by 1
          }
        }
        ValueId p = b.compare("gt", in(b, "p", {3, 4}, DType::kF32), b.full(0));
        ValueId q = b.compare("lt", in(b, "q", {4}, DType::kF32), b.full(0.5));
        b.output(b.op1("bitwise_and", {p, q}));
        b.output(b.op1("bitwise_or", {p, q}));
        b.output(b.op1("bitwise_xor", {p, q}));
        b.output(b.op1("bitwise_not", {p}));
      }};
  bitwise.ranges.int_low = -9;
  bitwise.ranges.int_high = 9;
  bitwise.floats_only = false;
  cases.push_back(bitwise);
  for (const char* op : {"add", "sub", "mul", "div", "lt", "le", "gt", "ge", "eq", "ne"}) {
    std::string name = op;
    cases.push_back({"binary_broadcast_" + name, {name}, [name](ProgramBuilder& b, DType t) {
                       ValueId x = in(b, "x", {2, 3, 4}, t);
                       ValueId y = in(b, "y", {3, 1}, t);
                       b.output(b.op1(name, {x, y}));
                     }});
  }
  cases.push_back({"gelu_backward", {"gelu_backward"}, [](ProgramBuilder& b, DType t) {
                     ValueId g = in(b, "g", {3, 5}, t);
                     b.output(b.op1("gelu_backward", {g, in(b, "x", {5}, t)}));
                   }});
  cases.push_back(
      {"layer_norm_backward", {"layer_norm_backward"}, [](ProgramBuilder& b, DType t) {
         ValueId g = in(b, "g", {2, 3, 7}, t);
         ValueId x = in(b, "x", {2, 3, 7}, t);
         b.output(b.op1("layer_norm_backward", {g, x, in(b, "w", {7}, t)}, {{"eps", 1e-5}}));
       }});
  OpCase pow_case{"pow", {"pow"}, [](ProgramBuilder& b, DType t) {
                    b.output(b.pow(in(b, "x", {4, 3}, t), in(b, "y", {3}, t)));
                  }};
  pow_case.ranges.float_low = 0.5;
  cases.push_back(pow_case);
  cases.push_back({"where_and_full", {"where", "full", "gt"}, [](ProgramBuilder& b, DType t) {
                     ValueId x = in(b, "x", {4, 6}, t);
                     ValueId c = b.compare("gt", x, b.full(0.25, {}, t));
                     b.output(b.where(c, x, b.full(-7, {1, 6}, t)));
                   }});
  cases.push_back({"cast_chain", {"cast"}, [](ProgramBuilder& b, DType t) {
                     ValueId x = in(b, "x", {5, 2}, t);
                     ValueId as_int = b.cast(b.mul(x, b.full(3, {}, t)), DType::kI32);
                     b.output(b.cast(as_int, t));
                     b.output(b.cast(x, DType::kBool));
                   }});
  OpCase ints{"integer_arithmetic", {"add", "mul", "eq"}, [](ProgramBuilder& b, DType) {
                ValueId x = in(b, "x", {3, 4}, DType::kI32);
                ValueId y = in(b, "y", {4}, DType::kI32);
                b.output(b.mul(b.add(x, y), y));
                b.output(b.compare("eq", x, y));
              }};
  ints.floats_only = false;
  cases.push_back(ints);
  for (const char* op : {"sum", "mean", "max"}) {
    std::string name = op;
    cases.push_back(
        {name + "_dims", {name}, [name](ProgramBuilder& b, DType t) {
           ValueId x = in(b, "x", {3, 4, 5}, t);
           b.output(b.op1(name, {x}, {{"dims", std::vector<int64_t>{-1}}}));
           b.output(
               b.op1(name, {x}, {{"dims", std::vector<int64_t>{0, 2}}, {"keepdim", int64_t{1}}}));
           b.output(b.op1(name, {x}, {{"dims", std::vector<int64_t>{1}}}));
           b.output(b.op1(name, {b.exp(x)}));  // every dim, with a prologue
         }});
  }
  cases.push_back({"softmax_family", {"softmax", "log_softmax"}, [](ProgramBuilder& b, DType t) {
                     ValueId x = in(b, "x", {3, 4, 6}, t);
                     b.output(b.softmax(x, -1));
                     b.output(b.softmax(x, 1));
                     b.output(b.mul(b.log_softmax(b.mul(x, b.full(2, {}, t)), -1), x));
                   }});
  cases.push_back({"layer_norm", {"layer_norm"}, [](ProgramBuilder& b, DType t) {
                     ValueId x = in(b, "x", {4, 8}, t);
                     ValueId w = in(b, "w", {8}, t);
                     ValueId bias = in(b, "b", {8}, t);
                     b.output(b.gelu(b.layer_norm(b.add(x, x), w, bias, 1e-5)));
                   }});
  OpCase ce{"losses", {"cross_entropy", "mse_loss"}, [](ProgramBuilder& b, DType t) {
              ValueId logits = in(b, "logits", {2, 3, 5}, t);
              ValueId labels = in(b, "labels", {2, 3}, DType::kI64);
              b.output(b.cross_entropy(logits, labels));
              b.output(b.mse_loss(logits, b.tanh(logits)));
            }};
  ce.ranges.int_high = 5;
  cases.push_back(ce);
  cases.push_back(
      {"views", {"reshape", "transpose", "permute", "slice"}, [](ProgramBuilder& b, DType t) {
         ValueId x = in(b, "x", {2, 3, 4}, t);
         ValueId p = b.permute(x, {2, 0, 1});
         b.output(b.exp(p));               // strided loads
         b.output(b.reshape(p, {4, 6}));   // needs a copy
         b.output(b.reshape(x, {6, -1}));  // a pure view
         b.output(b.slice(b.transpose(x, 0, 2), 1, 1, 3));
         b.output(b.add(b.slice(x, 2, 1, 3), b.full(1, {}, t)));
       }});
  cases.push_back({"matmul", {"matmul"}, [](ProgramBuilder& b, DType t) {
                     ValueId a = in(b, "a", {2, 3, 5, 4}, t);
                     ValueId w = in(b, "w", {4, 6}, t);
                     ValueId bb = in(b, "bb", {3, 4, 2}, t);
                     b.output(b.matmul(a, w));                           // shared B: folded into M
                     b.output(b.matmul(a, bb));                          // broadcast batch
                     b.output(b.matmul(b.transpose(a, 2, 3), a));        // A read transposed
                     b.output(b.matmul(b.permute(a, {1, 0, 2, 3}), w));  // batches looped
                   }});
  cases.push_back({"linear", {"linear"}, [](ProgramBuilder& b, DType t) {
                     ValueId x = in(b, "x", {2, 3, 8}, t);
                     ValueId w = in(b, "w", {5, 8}, t);
                     ValueId bias = in(b, "bias", {5}, t);
                     b.output(b.gelu(b.linear(x, w, bias)));
                     b.output(b.linear(b.transpose(x, 0, 1), w, compiler::ir::kNoValue));
                   }});
  OpCase gather{"gather", {"embedding", "concat"}, [](ProgramBuilder& b, DType t) {
                  ValueId table = in(b, "table", {7, 4}, t);
                  ValueId ids = in(b, "ids", {2, 3}, DType::kI64);
                  ValueId e = b.embedding(table, ids);
                  b.output(b.add(e, b.full(0.5, {}, t)));
                  b.output(b.concat({table, b.exp(table), b.slice(table, 0, 0, 2)}, 0));
                  b.output(b.concat({b.transpose(table, 0, 1), b.transpose(table, 0, 1)}, 1));
                }};
  gather.ranges.int_high = 7;
  cases.push_back(gather);
  OpCase dropout{"dropout", {"dropout"}, [](ProgramBuilder& b, DType t) {
                   ValueId x = in(b, "x", {6, 9}, t);
                   ValueId seed = b.full(1234, {}, DType::kI64);
                   ValueId offset = in(b, "offset", {}, DType::kI64);
                   b.output(b.dropout(b.add(x, x), seed, offset, 0.3));
                 }};
  dropout.ranges.int_high = 1000;
  cases.push_back(dropout);
  cases.push_back({"updates",
                   {"copy_into", "sgd_momentum_update", "adamw_update"},
                   [](ProgramBuilder& b, DType t) {
                     using compiler::ir::constant_init;
                     using compiler::ir::normal_init;
                     ValueId grad = in(b, "grad", {4, 3}, t);
                     ValueId p = b.param("p", {4, 3}, t, normal_init(1.0, 5));
                     ValueId q = b.param("q", {4, 3}, t, normal_init(1.0, 6));
                     ValueId buf = b.buffer("buf", {4, 3}, t, normal_init(0.1, 7));
                     ValueId m = b.buffer("m", {4, 3}, t, normal_init(0.1, 8));
                     ValueId v = b.buffer("v", {4, 3}, t, constant_init(0.05));
                     ValueId cache = b.buffer("cache", {2, 3}, t, constant_init(0));
                     auto scalar = [&](double value) { return b.full(value, {}, DType::kF32); };
                     std::vector<ValueId> sgd = b.sgd_momentum_update(p, grad, buf, scalar(0.1),
                                                                      scalar(0.9), scalar(0.01));
                     std::vector<ValueId> adam =
                         b.adamw_update(q, b.mul(grad, grad), m, v, scalar(0.01), scalar(0.9),
                                        scalar(0.999), scalar(1e-8), scalar(0.01), scalar(3));
                     b.output(b.copy_into(cache, b.slice(grad, 0, 1, 3)));
                     b.output(sgd[0]);
                     b.output(adam[2]);
                   }});
  cases.push_back({"attention", {"attention"}, [](ProgramBuilder& b, DType t) {
                     // More cases: tests/compiler/lowering/attention_kernel_test.cc.
                     ValueId q = in(b, "q", {2, 2, 3, 4}, t);
                     ValueId k = in(b, "k", {2, 1, 5, 4}, t);
                     ValueId v = in(b, "v", {2, 1, 5, 6}, t);
                     b.output(b.op1("attention", {q, k, v, in(b, "mask", {5}, t)},
                                    {{"scale", 0.5}, {"causal", int64_t{1}}}));
                   }});
  OpCase host{"host_ops", {"nonzero", "print"}, [](ProgramBuilder& b, DType t) {
                ValueId x = in(b, "x", {3, 4}, t);
                ValueId positive = b.compare("gt", x, b.full(0, {}, t));
                ValueId indices = b.nonzero(positive);
                // (The reference cannot cast a data-dependent shape yet; see
                // CastAfterNonzeroFollowsTheDataDependentShape.)
                b.output(b.print(indices, "indices"));
                b.output(b.exp(b.print(x, "x")));
              }};
  cases.push_back(host);
  return cases;
}

TEST(OpLowering, EveryRegisteredOpIsCoveredByACase) {
  std::set<std::string> covered;
  for (const OpCase& c : op_cases()) covered.insert(c.ops.begin(), c.ops.end());
  for (const std::string& op : compiler::ops::OpRegistry::global().op_names()) {
    EXPECT_TRUE(covered.count(op)) << "op '" << op << "' has no lowering test case";
  }
}

TEST(OpLowering, EveryOpMatchesTheReferenceOnSimInF32AndBf16) {
  uint32_t seed = 20261122;
  for (const OpCase& c : op_cases()) {
    std::vector<DType> dtypes = {DType::kF32};
    if (c.floats_only) dtypes.push_back(DType::kBF16);
    for (DType dtype : dtypes) {
      std::string label =
          c.label + "/" + runtime::dtype_name(dtype) + " seed " + std::to_string(seed);
      SCOPED_TRACE(label);
      try {
        ProgramBuilder builder(c.label, kSim);
        c.build(builder, dtype);
        compiler::ir::Program program = builder.build();
        testing::HostTensorList inputs = testing::random_inputs(program, seed++, c.ranges);
        testing::expect_matches_reference(program, inputs, kSim, testing::tolerance_for(dtype),
                                          label);
      } catch (const std::exception& error) {
        ADD_FAILURE() << label << ": " << error.what();
      }
    }
  }
}

// Note [Erf as one expression]: erf is one kErf expr (GROVE_FAST_ERF unset),
// or written out (0); on the host both give the same bits, zeros, infinities
// and NaN included, within 1e-6 of std::erf (the formula in f32), and on
// cuda (when present) kErf is within 1e-6 of them.
TEST(OpLowering, ErfAsOneExpressionMatchesTheWrittenOutForm) {
  auto erf_kernel = [](const char* fast) {
    ::grove::testing::ScopedEnv env("GROVE_FAST_ERF", fast);
    compiler::codegen::KernelBuilder k("erf", {4096});
    const int x = k.load(k.input(DType::kF32, {1}));
    k.output(compiler::ops::OpRegistry::global().get("erf").elementwise_expr(k, {x}, {})[0],
             DType::kF32, {1});
    return k.build();
  };
  const compiler::codegen::KernelSpec one = erf_kernel("1");
  const compiler::codegen::KernelSpec written_out = erf_kernel("0");
  auto has_erf = [](const compiler::codegen::KernelSpec& spec) {
    for (const compiler::codegen::Expr& expr : spec.exprs) {
      if (expr.op == compiler::codegen::ExprOp::kErf) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_erf(one));
  EXPECT_FALSE(has_erf(written_out));
  std::mt19937 rng(77);
  std::vector<testing::Buffer> inputs = {testing::random_buffer(rng, DType::kF32, 4096, -6, 6)};
  inputs[0].values[0] = 0.0;
  inputs[0].values[1] = -0.0;
  inputs[0].values[2] = std::numeric_limits<double>::infinity();
  inputs[0].values[3] = -std::numeric_limits<double>::infinity();
  inputs[0].values[4] = std::numeric_limits<double>::quiet_NaN();
  inputs[0].values[5] = 1e-30;
  inputs[0].values[6] = 30.0;
  const std::vector<testing::Buffer> host = testing::run_kernel(one, runtime::kSimDevice, inputs);
  const std::vector<testing::Buffer> expected =
      testing::run_kernel(written_out, runtime::kSimDevice, inputs);
  for (size_t i = 0; i < host[0].values.size(); ++i) {
    ASSERT_TRUE(testing::close(host[0].values[i], expected[0].values[i], 0, 0))
        << "x " << inputs[0].values[i] << ": " << host[0].values[i] << " against "
        << expected[0].values[i];
    ASSERT_TRUE(testing::close(host[0].values[i], std::erf(inputs[0].values[i]), 0, 1e-6))
        << "x " << inputs[0].values[i];
  }
  if (runtime::cuda_device_count() == 0) return;
  const std::vector<testing::Buffer> cuda = testing::run_kernel(one, runtime::kCudaDevice, inputs);
  for (size_t i = 0; i < cuda[0].values.size(); ++i) {
    ASSERT_TRUE(testing::close(cuda[0].values[i], expected[0].values[i], 0, 1e-6))
        << "x " << inputs[0].values[i] << ": cuda " << cuda[0].values[i] << ", host "
        << expected[0].values[i];
  }
}

// Note [Concat parts compute their operand]: rotate_half(x) = cat(-x2, x1)
// as rotary embeddings use it: the negation is computed by the concat's part
// kernel, not a kernel of its own.
// An integer reduction read by an integer op in the same kernel (reduction_ops.cc:
// the reduced f32 value is cast to the reduction's dtype): the importer's exact
// integer sums add 8-bit pieces' sums; before, building the kernel failed.
TEST(OpLowering, IntegerReductionsFeedIntegerOpsInOneKernel) {
  for (const DType dtype : {DType::kI64, DType::kI32}) {
    ProgramBuilder b("integer_sums", kSim);
    ValueId x = in(b, "x", {3, 40}, dtype);
    ValueId y = in(b, "y", {3}, dtype);
    b.output(b.add(b.add(b.sum(x, {1}), y), b.max(x, {1})));
    compiler::ir::Program program = b.build();
    testing::InputRanges ranges;
    ranges.int_low = -200;
    ranges.int_high = 200;
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261128, ranges),
                                      kSim, testing::Tolerance{0, 0}, "integer_sums");
  }
}

TEST(Concat, NegatedHalfCostsNoKernel) {
  ProgramBuilder b("rotary", kSim);
  ValueId x = in(b, "x", {2, 3, 8}, DType::kF32);
  ValueId cos = in(b, "cos", {3, 8}, DType::kF32);
  ValueId sin = in(b, "sin", {3, 8}, DType::kF32);
  ValueId rotated = b.concat({b.op1("neg", {b.slice(x, 2, 4, 8)}), b.slice(x, 2, 0, 4)}, 2);
  b.output(b.add(b.mul(x, cos), b.mul(rotated, sin)));
  compiler::ir::Program program = b.build();
  compiler::lowering::ScheduleOptions options;
  options.load_kernels = false;
  int kernels = 0;
  for (const compiler::lowering::Step& step :
       compiler::lowering::schedule_program(program, options).steps) {
    kernels += step.kind == compiler::lowering::StepKind::kKernel ? 1 : 0;
  }
  // The concat (Note [One kernel for a concat of equal parts]: both halves,
  // one negated) and the multiply-add.
  EXPECT_EQ(kernels, 2);
  testing::expect_matches_reference(program, testing::random_inputs(program, 20261130), kSim,
                                    testing::tolerance_for(DType::kF32), "rotary");
}

int concat_kernels(const compiler::ir::Program& program) {
  compiler::lowering::ScheduleOptions options;
  options.load_kernels = false;
  int kernels = 0;
  for (const compiler::lowering::Step& step :
       compiler::lowering::schedule_program(program, options).steps) {
    kernels += step.kind == compiler::lowering::StepKind::kKernel && step.op == "concat" ? 1 : 0;
  }
  return kernels;
}

// Note [One kernel for a concat of equal parts]: parts of one shape along a
// middle dim, one read through a transposed layout and one computed (an exp
// nothing else reads), are one kernel; parts of different sizes, or more
// parts than kMaxConcatParts, are one kernel each. Values match the reference.
TEST(Concat, EqualPartsAreOneKernel) {
  for (const int parts : {2, 3, 5}) {
    for (const bool equal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << parts << " parts, equal " << equal);
      ProgramBuilder b("concat", kSim);
      ValueId transposed = b.transpose(in(b, "t", {4, 3, 2}, DType::kF32), 0, 2);  // [2, 3, 4]
      std::vector<ValueId> operands = {transposed, b.exp(in(b, "e", {2, 3, 4}, DType::kF32))};
      for (int p = 2; p < parts; ++p) {
        operands.push_back(in(b, "x" + std::to_string(p), {2, equal ? 3 : p, 4}, DType::kF32));
      }
      b.output(b.mul(b.concat(operands, 1), b.full(2.0)));
      compiler::ir::Program program = b.build();
      const bool one =
          parts <= static_cast<int>(compiler::lowering::kMaxConcatParts) && (equal || parts == 2);
      EXPECT_EQ(concat_kernels(program), one ? 1 : parts);
      testing::expect_matches_reference(program, testing::random_inputs(program, 20261126 + parts),
                                        kSim, testing::tolerance_for(DType::kF32), "concat");
    }
  }
}

int kernel_steps(const compiler::ir::Program& program) {
  compiler::lowering::ScheduleOptions options;
  options.load_kernels = false;
  int kernels = 0;
  for (const compiler::lowering::Step& step :
       compiler::lowering::schedule_program(program, options).steps) {
    kernels += step.kind == compiler::lowering::StepKind::kKernel ? 1 : 0;
  }
  return kernels;
}

// Note [Per-row values broadcast in their reduction's kernel] (fusion.cc):
// rms_norm written out as LLaMA writes it is one kernel (the reduction, then
// per element x * rsqrt(...) * weight); a per-row value that something else
// also reads, one of a reduction over a leading dim, or one without keepdim
// keeps its own kernel. Every case matches the reference.
TEST(Fusion, RmsNormWrittenOutIsOneKernel) {
  struct Case {
    const char* label;
    std::vector<int64_t> dims;
    bool keepdim;
    bool read_twice;
    int kernels;
  };
  for (const Case& c :
       {Case{"rms_norm", {2}, true, false, 1}, Case{"per-row value read twice", {2}, true, true, 2},
        Case{"over a leading dim", {0}, true, false, 2},
        Case{"without keepdim", {2}, false, false, 2}}) {
    SCOPED_TRACE(c.label);
    ProgramBuilder b("rms_norm", kSim);
    ValueId x = in(b, "x", {3, 5, 16}, DType::kF32);
    ValueId weight = in(b, "weight", {16}, DType::kF32);
    ValueId scale = b.rsqrt(b.add(b.mean(b.mul(x, x), c.dims, c.keepdim), b.full(1e-6)));
    if (!c.keepdim) scale = b.reshape(scale, {3, 5, 1});
    b.output(b.mul(b.mul(x, scale), weight));
    if (c.read_twice) b.output(b.exp(scale));
    compiler::ir::Program program = b.build();
    EXPECT_EQ(kernel_steps(program), c.kernels + (c.read_twice ? 1 : 0));
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261126), kSim,
                                      testing::tolerance_for(DType::kF32), c.label);
  }
}

// Note [Attention results with heads last] (attention_kernel.cc), for the
// written-out attention's last product: at batch 1 the GEMM writes the heads
// where merging them back is a view (no copy kernel), as a 4-d matmul and as
// bmm's [H, T, D] read as [1, H, T, D]; at batch 2 (the GEMM would split into
// a launch per batch) and for a product that is also an output, the copy
// stays. Values match the reference.
TEST(Matmul, HeadsMergedBackCostNoCopyAtBatchOne) {
  struct Case {
    const char* label;
    int64_t batch;
    bool three_d;
    bool also_output;
    int kernels;
  };
  for (const Case& c :
       {Case{"4-d, batch 1", 1, false, false, 0}, Case{"bmm, batch 1", 1, true, false, 0},
        Case{"4-d, batch 2", 2, false, false, 1},
        Case{"4-d, batch 1, also an output", 1, false, true, 1}}) {
    SCOPED_TRACE(c.label);
    ProgramBuilder b("heads", kSim);
    const int64_t heads = 4, time = 6, width = 8;
    ValueId product;
    if (c.three_d) {
      ValueId p = in(b, "p", {c.batch * heads, time, time}, DType::kF32);
      ValueId v = in(b, "v", {c.batch * heads, time, width}, DType::kF32);
      product = b.reshape(b.matmul(p, v), {c.batch, heads, time, width});
    } else {
      ValueId p = in(b, "p", {c.batch, heads, time, time}, DType::kF32);
      ValueId v = in(b, "v", {c.batch, heads, time, width}, DType::kF32);
      product = b.matmul(p, v);
    }
    b.output(b.reshape(b.transpose(product, 1, 2), {c.batch, time, heads * width}));
    if (c.also_output) b.output(product);
    compiler::ir::Program program = b.build();
    EXPECT_EQ(kernel_steps(program), c.kernels);
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261126), kSim,
                                      testing::tolerance_for(DType::kF32), c.label);
  }
}

// Note [Small values computed per element] (fusion.cc): an inference batch
// norm as the importer writes it, then relu, is one kernel; a small value
// read by two consumers, or one too large, keeps its kernel. Values match the
// reference.
TEST(Fusion, BatchNormInferenceIsOneKernel) {
  for (const int64_t channels : {16, 5000}) {
    SCOPED_TRACE(channels);
    ProgramBuilder b("batch_norm", kSim);
    ValueId x = in(b, "x", {2, channels, 3, 3}, DType::kF32);
    auto per_channel = [&](const char* name) {
      return b.reshape(in(b, name, {channels}, DType::kF32), {channels, 1, 1});
    };
    ValueId var = b.exp(per_channel("var"));
    ValueId scale = b.mul(b.rsqrt(b.add(var, b.full(1e-5))), per_channel("weight"));
    ValueId out = b.add(b.mul(b.sub(x, per_channel("mean")), scale), per_channel("bias"));
    b.output(b.op1("relu", {out}));
    compiler::ir::Program program = b.build();
    EXPECT_EQ(kernel_steps(program), channels <= 4096 ? 1 : 2);
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261126), kSim,
                                      testing::tolerance_for(DType::kF32), "batch_norm");
  }
  ProgramBuilder b("shared", kSim);
  ValueId x = in(b, "x", {2, 4, 3}, DType::kF32);
  ValueId small = b.exp(in(b, "s", {4, 1}, DType::kF32));
  b.output(b.mul(x, small));
  b.output(b.add(x, small));
  compiler::ir::Program program = b.build();
  EXPECT_EQ(kernel_steps(program), 3);
  testing::expect_matches_reference(program, testing::random_inputs(program, 20261127), kSim,
                                    testing::tolerance_for(DType::kF32), "shared");
}

// Note [Gathers and ids computed where they are read] (fusion.cc): a learned
// position embedding [1, T, D] added to the token embeddings [B, T, D] and
// layer-normed is one kernel (GROVE_FUSE_GATHERS=0: two); gathered rows read
// by two consumers keep their kernel. Values match the reference.
TEST(Fusion, BroadcastEmbeddingIsComputedByItsConsumer) {
  testing::InputRanges ranges;
  ranges.int_high = 10;
  for (const bool read_twice : {false, true}) {
    SCOPED_TRACE(read_twice);
    ProgramBuilder b("positions", kSim);
    ValueId tokens = in(b, "tokens", {4, 6, 8}, DType::kF32);
    ValueId positions = b.embedding(in(b, "table", {10, 8}, DType::kF32),
                                    in(b, "position_ids", {1, 6}, DType::kI64));
    ValueId normed = b.layer_norm(b.add(tokens, positions), in(b, "w", {8}, DType::kF32),
                                  in(b, "b", {8}, DType::kF32));
    b.output(normed);
    if (read_twice) b.output(b.mul(tokens, positions));
    compiler::ir::Program program = b.build();
    EXPECT_EQ(kernel_steps(program), read_twice ? 3 : 1);
    ::setenv("GROVE_FUSE_GATHERS", "0", 1);
    EXPECT_EQ(kernel_steps(program), read_twice ? 3 : 2);
    ::unsetenv("GROVE_FUSE_GATHERS");
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261127, ranges),
                                      kSim, testing::tolerance_for(DType::kF32), "positions");
  }
}

// Note [Gathers and ids computed where they are read]: advanced indexing
// mask[b, kv] as the importer writes it (each index wrapped for negative
// values, the batch's times the row length, plus the key's) is one kernel,
// the gather's, with the ids computed per element (GROVE_FUSE_GATHERS=0:
// two); negative ids count from the end, as before.
TEST(Fusion, EmbeddingIdsAreComputedByTheGather) {
  ProgramBuilder b("indexing", kSim);
  ValueId table = b.reshape(in(b, "mask", {3, 5}, DType::kF32), {15, 1});
  auto wrapped = [&](ValueId ids, int64_t size) {
    ValueId negative = b.compare("lt", ids, b.full(0, {}, DType::kI64));
    return b.where(negative, b.add(ids, b.full(static_cast<double>(size), {}, DType::kI64)), ids);
  };
  ValueId rows = b.mul(wrapped(in(b, "batch", {3, 1}, DType::kI64), 3), b.full(5, {}, DType::kI64));
  ValueId flat = b.add(rows, wrapped(in(b, "keys", {1, 5}, DType::kI64), 5));
  b.output(b.embedding(table, flat));
  compiler::ir::Program program = b.build();
  EXPECT_EQ(kernel_steps(program), 1);
  ::setenv("GROVE_FUSE_GATHERS", "0", 1);
  EXPECT_EQ(kernel_steps(program), 2);
  ::unsetenv("GROVE_FUSE_GATHERS");
  testing::InputRanges ranges;
  ranges.int_low = -3;
  ranges.int_high = 3;
  testing::expect_matches_reference(program, testing::random_inputs(program, 20261127, ranges),
                                    kSim, testing::tolerance_for(DType::kF32), "indexing");
}

// Note [GEMM epilogues in lowering], through a view: linear's rows put back
// as [B, T, N] and then gelu'd cost no kernel (the GEMM applies bias and
// gelu); with the linear's rows also read elsewhere, the gelu is a kernel.
TEST(GemmEpilogue, GeluReadThroughAReshapeIsTheGemms) {
  for (const bool rows_read_too : {false, true}) {
    SCOPED_TRACE(rows_read_too);
    ProgramBuilder b("mlp", kSim);
    ValueId x = in(b, "x", {6, 8}, DType::kF32);
    ValueId rows = b.linear(x, in(b, "w", {16, 8}, DType::kF32), in(b, "b", {16}, DType::kF32));
    b.output(b.gelu(b.reshape(rows, {2, 3, 16})));
    if (rows_read_too) b.output(b.exp(rows));
    compiler::ir::Program program = b.build();
    EXPECT_EQ(kernel_steps(program), rows_read_too ? 2 : 0);
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261126), kSim,
                                      testing::tolerance_for(DType::kF32), "mlp");
  }
}

// Note [No kernel over no elements] (scheduler.cc): an elementwise value
// with no elements costs no kernel (its empty output is still returned, and
// one computed from it too); a reduction with no rows costs none either.
TEST(Kernels, NoneForEmptyValues) {
  ProgramBuilder b("empty", kSim);
  ValueId nothing = b.exp(in(b, "nothing", {0, 4}, DType::kF32));
  b.output(nothing);
  b.output(b.add(nothing, b.full(1.0, {0, 4})));
  b.output(b.exp(in(b, "x", {3}, DType::kF32)));
  b.output(b.sum(in(b, "no_rows", {0, 5}, DType::kF32), {1}));
  compiler::ir::Program program = b.build();
  EXPECT_EQ(kernel_steps(program), 2);  // exp(x) and the empty sum's reduction
  testing::expect_matches_reference(program, testing::random_inputs(program, 20261126), kSim,
                                    testing::tolerance_for(DType::kF32), "empty");
}

TEST(OpLowering, CastAfterNonzeroFollowsTheDataDependentShape) {
  ProgramBuilder b("dynamic", kSim);
  ValueId x = b.input("x", {5, 3});
  ValueId indices = b.nonzero(b.compare("gt", x, b.full(0.0)), "positions");
  b.output(b.cast(indices, DType::kF32, "as_float"));
  compiler::ir::Program program = b.build();
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
  for (uint32_t seed : {1u, 2u, 3u}) {
    testing::HostTensorList inputs = testing::random_inputs(program, seed);
    std::vector<double> expected;
    for (int64_t i = 0; i < 15; ++i) {
      if (inputs[0].data[static_cast<size_t>(i)] > 0) {
        expected.push_back(static_cast<double>(i / 3));
        expected.push_back(static_cast<double>(i % 3));
      }
    }
    compiler::TensorList outputs = lowered.function().call({testing::to_device(inputs[0], kSim)});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].dtype(), DType::kF32);
    EXPECT_EQ(outputs[0].shape(), runtime::Shape({static_cast<int64_t>(expected.size() / 2), 2}));
    EXPECT_EQ(outputs[0].to_doubles(), expected) << "seed " << seed;
  }
  // The cast runs on a shape known only after the sync: it is not capturable.
  ASSERT_EQ(lowered.function().segments.size(), 3u);
  EXPECT_EQ(lowered.function().segments[2].op, "cast");
  EXPECT_EQ(lowered.function().segments[2].node_name, "as_float");
  EXPECT_FALSE(lowered.function().segments[2].capturable());
}

}  // namespace
}  // namespace grove
