#include "compiler/codegen/kernel_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/error.h"

namespace grove::compiler::codegen {
namespace {

using runtime::DType;

const char* op_name(ExprOp op) {
  switch (op) {
    case ExprOp::kLoad:
      return "load";
    case ExprOp::kConstant:
      return "const";
    case ExprOp::kScalarParam:
      return "scalar";
    case ExprOp::kReduced:
      return "reduced";
    case ExprOp::kIndex:
      return "index";
    case ExprOp::kNeg:
      return "neg";
    case ExprOp::kExp:
      return "exp";
    case ExprOp::kLog:
      return "log";
    case ExprOp::kTanh:
      return "tanh";
    case ExprOp::kSigmoid:
      return "sigmoid";
    case ExprOp::kRelu:
      return "relu";
    case ExprOp::kGelu:
      return "gelu";
    case ExprOp::kSqrt:
      return "sqrt";
    case ExprOp::kRsqrt:
      return "rsqrt";
    case ExprOp::kAbs:
      return "abs";
    case ExprOp::kNot:
      return "not";
    case ExprOp::kFloor:
      return "floor";
    case ExprOp::kCeil:
      return "ceil";
    case ExprOp::kTrunc:
      return "trunc";
    case ExprOp::kRound:
      return "round";
    case ExprOp::kAdd:
      return "add";
    case ExprOp::kSub:
      return "sub";
    case ExprOp::kMul:
      return "mul";
    case ExprOp::kDiv:
      return "div";
    case ExprOp::kPow:
      return "pow";
    case ExprOp::kMax:
      return "max";
    case ExprOp::kMin:
      return "min";
    case ExprOp::kLt:
      return "lt";
    case ExprOp::kLe:
      return "le";
    case ExprOp::kGt:
      return "gt";
    case ExprOp::kGe:
      return "ge";
    case ExprOp::kEq:
      return "eq";
    case ExprOp::kNe:
      return "ne";
    case ExprOp::kAnd:
      return "and";
    case ExprOp::kOr:
      return "or";
    case ExprOp::kIntDiv:
      return "int_div";
    case ExprOp::kXor:
      return "xor";
    case ExprOp::kWhere:
      return "where";
    case ExprOp::kCast:
      return "cast";
    case ExprOp::kLoadAt:
      return "load_at";
    case ExprOp::kPhilox:
      return "philox";
    case ExprOp::kErf:
      return "erf";
    case ExprOp::kRoundToBf16:
      return "round_to_bf16";
    case ExprOp::kRoundToF16:
      return "round_to_f16";
  }
  return "?";
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

int operand_count(ExprOp op) {
  switch (op) {
    case ExprOp::kLoad:
    case ExprOp::kConstant:
    case ExprOp::kScalarParam:
    case ExprOp::kReduced:
    case ExprOp::kIndex:
      return 0;
    case ExprOp::kWhere:
      return 3;
    case ExprOp::kAdd:
    case ExprOp::kSub:
    case ExprOp::kMul:
    case ExprOp::kDiv:
    case ExprOp::kPow:
    case ExprOp::kMax:
    case ExprOp::kMin:
    case ExprOp::kLt:
    case ExprOp::kLe:
    case ExprOp::kGt:
    case ExprOp::kGe:
    case ExprOp::kEq:
    case ExprOp::kNe:
    case ExprOp::kAnd:
    case ExprOp::kOr:
    case ExprOp::kXor:
    case ExprOp::kIntDiv:
    case ExprOp::kPhilox:
      return 2;
    default:
      return 1;
  }
}

bool is_register_type(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kI32 || dtype == DType::kI64 ||
         dtype == DType::kBool;
}

bool is_memory_type(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kF64 || dtype == DType::kI32 || dtype == DType::kI64 ||
         dtype == DType::kBool;
}

bool is_numeric_register(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kI32 || dtype == DType::kI64;
}

void append_shape(std::ostringstream& out, const runtime::Shape& shape) {
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
  out << ']';
}

// Note [Multi-part kernels] (kernel_spec.h).
void verify_parts(const KernelSpec& spec, const std::string& where) {
  const std::string what = str_cat(where, " (", spec.part_sizes.size(), " parts)");
  GROVE_CHECK(spec.reductions.empty(), what, ": a multi-part kernel cannot reduce; found ",
              spec.reductions.size(), " reductions");
  GROVE_CHECK_AS(ShapeError, spec.iteration_shape.size() == 1, what,
                 ": expected a rank-1 iteration shape, found ",
                 runtime::shape_str(spec.iteration_shape));
  int64_t largest = 0;
  for (int64_t size : spec.part_sizes) {
    GROVE_CHECK_AS(ShapeError, size >= 0, what, ": part sizes ",
                   runtime::shape_str(spec.part_sizes), " include a negative size");
    largest = std::max(largest, size);
  }
  GROVE_CHECK_AS(ShapeError, spec.iteration_shape[0] == largest, what, ": iteration shape ",
                 runtime::shape_str(spec.iteration_shape), " must be {", largest,
                 "}, the largest part size");
  auto unit_or_zero = [](const runtime::Shape& strides) {
    return strides.size() == 1 && (strides[0] == 0 || strides[0] == 1);
  };
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    GROVE_CHECK_AS(ShapeError, unit_or_zero(spec.inputs[i].strides), what, ": input ", i,
                   " has strides ", runtime::shape_str(spec.inputs[i].strides),
                   ", expected {1} or {0}");
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    GROVE_CHECK_AS(ShapeError, unit_or_zero(spec.outputs[o].strides), what, ": output ", o,
                   " has strides ", runtime::shape_str(spec.outputs[o].strides),
                   ", expected {1} or {0}");
  }
  // Note [Multi-part kernel arguments] (kernel_spec.h).
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const int input = spec.outputs[o].in_place_input;
    if (input < 0) {
      continue;
    }
    GROVE_CHECK(input < static_cast<int>(spec.inputs.size()) &&
                    !spec.inputs[static_cast<size_t>(input)].shared_by_parts,
                what, ": output ", o, " is written in place through input ", input,
                ", which must be an input of the kernel that is not shared by parts");
    GROVE_CHECK(spec.inputs[static_cast<size_t>(input)].strides == spec.outputs[o].strides, what,
                ": output ", o, " is written in place through input ", input,
                " but their strides differ (", runtime::shape_str(spec.outputs[o].strides), " vs ",
                runtime::shape_str(spec.inputs[static_cast<size_t>(input)].strides), ")");
  }
  for (size_t i = 0; i < spec.exprs.size(); ++i) {
    ExprOp op = spec.exprs[i].op;
    GROVE_CHECK(op != ExprOp::kIndex && op != ExprOp::kLoadAt && op != ExprOp::kPhilox, what,
                ": expr ", i, " (", op_name(op),
                ") depends on the element's position, which a multi-part kernel does not keep");
  }
}

}  // namespace

size_t KernelSpec::input_argument_count() const {
  size_t shared = 0;
  for (const BufferSpec& input : inputs) {
    shared += input.shared_by_parts ? 1 : 0;
  }
  return shared + (inputs.size() - shared) * part_count();
}

size_t KernelSpec::output_argument_count() const {
  size_t in_place = 0;
  for (const OutputSpec& output : outputs) {
    in_place += output.in_place_input >= 0 ? 1 : 0;
  }
  return (outputs.size() - in_place) * part_count();
}

int64_t KernelSpec::element_count() const { return runtime::shape_numel(iteration_shape); }

int64_t KernelSpec::row_length() const {
  return iteration_shape.empty() ? 1 : iteration_shape.back();
}

int64_t KernelSpec::row_count() const {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < iteration_shape.size(); ++d) rows *= iteration_shape[d];
  return rows;
}

std::string KernelSpec::signature() const {
  std::ostringstream out;
  out << name << "|shape=";
  append_shape(out, iteration_shape);
  out << "|in=";
  for (const BufferSpec& input : inputs) {
    out << dtype_name(input.dtype);
    append_shape(out, input.strides);
    if (input.shared_by_parts) {
      out << ":shared";
    }
    out << ';';
  }
  out << "|scalars=" << scalar_count << "|exprs=";
  for (const Expr& expr : exprs) {
    out << op_name(expr.op) << ':' << dtype_name(expr.dtype);
    switch (expr.op) {
      case ExprOp::kLoad:
      case ExprOp::kScalarParam:
      case ExprOp::kIndex:
      case ExprOp::kLoadAt:
        out << ':' << expr.input;
        break;
      case ExprOp::kReduced:
        out << ':' << expr.reduction;
        break;
      case ExprOp::kConstant: {
        // Hexadecimal floats print every bit, so equal signatures mean equal constants.
        char buffer[64];
        std::snprintf(buffer, sizeof(buffer), "%a", expr.constant);
        out << ':' << buffer;
        break;
      }
      default:
        break;
    }
    for (int operand : expr.operands) out << ',' << operand;
    out << ';';
  }
  out << "|reduce=";
  for (const Reduction& reduction : reductions) {
    out << reduce_name(reduction.op) << ':' << reduction.expr << ';';
  }
  out << "|out=";
  for (const OutputSpec& output : outputs) {
    out << dtype_name(output.dtype) << ':' << output.expr << (output.per_row ? ":row" : "");
    append_shape(out, output.strides);
    if (output.in_place_input >= 0) {
      out << ":in_place=" << output.in_place_input;
    }
    out << ';';
  }
  if (!part_sizes.empty()) {
    out << "|parts=";
    append_shape(out, part_sizes);
  }
  if (warp_rows) out << "|warp_rows";
  if (warp_rows_max_unroll > 0) out << "|unroll<=" << warp_rows_max_unroll;
  if (thread_rows) out << "|thread_rows";
  return out.str();
}

void KernelSpec::verify() const {
  const std::string where = str_cat("kernel spec '", name, "'");
  GROVE_CHECK(!name.empty(), "kernel spec: expected a non-empty name (used in the symbol name)");
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    GROVE_CHECK(ok, where,
                ": expected a name of letters, digits and '_' (not starting with a digit),",
                " found character '", c, "' at position ", i, "; rename the kernel");
  }
  const size_t rank = iteration_shape.size();
  for (size_t d = 0; d < rank; ++d) {
    GROVE_CHECK_AS(ShapeError, iteration_shape[d] >= 0, where, ": iteration_shape ",
                   runtime::shape_str(iteration_shape), " has negative dimension ", d);
  }
  GROVE_CHECK(scalar_count >= 0, where, ": scalar_count must be >= 0, found ", scalar_count);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BufferSpec& input = inputs[i];
    GROVE_CHECK_AS(DTypeError, is_memory_type(input.dtype), where, ": input ", i, " has dtype ",
                   input.dtype, ", which kernels cannot load");
    GROVE_CHECK_AS(ShapeError, input.strides.size() == rank, where, ": input ", i, " has strides ",
                   runtime::shape_str(input.strides), " of rank ", input.strides.size(),
                   ", expected the iteration rank ", rank);
    for (int64_t stride : input.strides) {
      GROVE_CHECK_AS(ShapeError, stride >= 0, where, ": input ", i, " has a negative stride in ",
                     runtime::shape_str(input.strides), "; make the tensor contiguous first");
    }
  }
  GROVE_CHECK(!thread_rows || (!reductions.empty() && !warp_rows), where,
              ": thread_rows is set but the kernel has no reductions or also has warp_rows; "
              "only reduction kernels reduce rows one per thread (Note [Thread-per-row "
              "reductions])");
  GROVE_CHECK(!warp_rows || !reductions.empty(), where,
              ": warp_rows is set but the kernel has no reductions; only reduction kernels "
              "reduce rows with warps (Note [Warp-per-row reductions])");
  if (!reductions.empty()) {
    GROVE_CHECK_AS(ShapeError, rank >= 1, where,
                   ": a reduction kernel needs an iteration rank >= 1 (the last dimension is "
                   "reduced), found rank 0");
  }

  // Per expr: does its value vary along the reduced (last) dimension, and the
  // highest reduction index it reads (-1 for none).
  std::vector<bool> varies_along_row(exprs.size(), false);
  std::vector<int> max_reduction_read(exprs.size(), -1);
  const int last_dim = static_cast<int>(rank) - 1;
  for (size_t i = 0; i < exprs.size(); ++i) {
    const Expr& expr = exprs[i];
    const std::string what = str_cat(where, ": expr ", i, " (", op_name(expr.op), ")");
    GROVE_CHECK_AS(DTypeError, is_register_type(expr.dtype), what, " has dtype ", expr.dtype,
                   "; expression values are f32, i32, i64 or bool");
    const int expected_operands = operand_count(expr.op);
    GROVE_CHECK(static_cast<int>(expr.operands.size()) == expected_operands, what, " expects ",
                expected_operands, " operands, found ", expr.operands.size());
    for (int operand : expr.operands) {
      GROVE_CHECK(operand >= 0 && operand < static_cast<int>(i), what, " reads expr ", operand,
                  "; operands must be earlier exprs (0..", static_cast<int>(i) - 1, ")");
      varies_along_row[i] = varies_along_row[i] || varies_along_row[operand];
      max_reduction_read[i] = std::max(max_reduction_read[i], max_reduction_read[operand]);
    }
    auto operand_dtype = [&](size_t k) { return exprs[expr.operands[k]].dtype; };
    auto require = [&](bool ok, const std::string& expected) {
      std::ostringstream found;
      found << "result " << expr.dtype;
      for (size_t k = 0; k < expr.operands.size(); ++k) found << ", operand " << operand_dtype(k);
      GROVE_CHECK_AS(DTypeError, ok, what, ": expected ", expected, ", found ", found.str());
    };
    switch (expr.op) {
      case ExprOp::kLoad:
        GROVE_CHECK(expr.input >= 0 && expr.input < static_cast<int>(inputs.size()), what,
                    " loads input ", expr.input, " but the kernel has ", inputs.size(), " inputs");
        varies_along_row[i] =
            rank > 0 && inputs[expr.input].strides[last_dim] != 0 && iteration_shape[last_dim] != 1;
        break;
      case ExprOp::kConstant:
        GROVE_CHECK(expr.dtype == DType::kF32 || std::isfinite(expr.constant), what,
                    ": an integer constant must be finite, found ", expr.constant);
        break;
      case ExprOp::kScalarParam:
        GROVE_CHECK(expr.input >= 0 && expr.input < scalar_count, what, " reads scalar ",
                    expr.input, " but the kernel has ", scalar_count, " scalars");
        require(expr.dtype == DType::kF32, "an f32 scalar");
        break;
      case ExprOp::kReduced:
        GROVE_CHECK(expr.reduction >= 0 && expr.reduction < static_cast<int>(reductions.size()),
                    what, " reads reduction ", expr.reduction, " but the kernel has ",
                    reductions.size(), " reductions");
        require(expr.dtype == DType::kF32, "an f32 reduction result");
        max_reduction_read[i] = expr.reduction;
        break;
      case ExprOp::kIndex:
        GROVE_CHECK(expr.input >= 0 && expr.input < static_cast<int>(rank), what,
                    " reads the index of dimension ", expr.input, " but the iteration rank is ",
                    rank);
        require(expr.dtype == DType::kI64, "an i64 index");
        varies_along_row[i] = expr.input == last_dim;
        break;
      case ExprOp::kExp:
      case ExprOp::kLog:
      case ExprOp::kTanh:
      case ExprOp::kSigmoid:
      case ExprOp::kGelu:
      case ExprOp::kSqrt:
      case ExprOp::kRsqrt:
      case ExprOp::kFloor:
      case ExprOp::kCeil:
      case ExprOp::kTrunc:
      case ExprOp::kRound:
      case ExprOp::kErf:
      case ExprOp::kRoundToBf16:
      case ExprOp::kRoundToF16:
        require(expr.dtype == DType::kF32 && operand_dtype(0) == DType::kF32, "f32 -> f32");
        break;
      case ExprOp::kNeg:
      case ExprOp::kRelu:
      case ExprOp::kAbs:
        require(is_numeric_register(expr.dtype) && operand_dtype(0) == expr.dtype,
                "a numeric operand of the result's dtype");
        break;
      case ExprOp::kNot:
        require(expr.dtype != DType::kF32 && operand_dtype(0) == expr.dtype,
                "a bool or integer operand of the result's dtype");
        break;
      case ExprOp::kAdd:
      case ExprOp::kSub:
      case ExprOp::kMul:
      case ExprOp::kMax:
      case ExprOp::kMin:
        require(is_numeric_register(expr.dtype) && operand_dtype(0) == expr.dtype &&
                    operand_dtype(1) == expr.dtype,
                "numeric operands of the result's dtype");
        break;
      case ExprOp::kDiv:
      case ExprOp::kPow:
        require(expr.dtype == DType::kF32 && operand_dtype(0) == DType::kF32 &&
                    operand_dtype(1) == DType::kF32,
                "f32 operands and result (cast integers first)");
        break;
      case ExprOp::kLt:
      case ExprOp::kLe:
      case ExprOp::kGt:
      case ExprOp::kGe:
      case ExprOp::kEq:
      case ExprOp::kNe:
        require(expr.dtype == DType::kBool && operand_dtype(0) == operand_dtype(1),
                "two operands of one dtype and a bool result");
        break;
      case ExprOp::kIntDiv:
        require((expr.dtype == DType::kI32 || expr.dtype == DType::kI64) &&
                    operand_dtype(0) == expr.dtype && operand_dtype(1) == expr.dtype,
                "integer operands of the result's dtype");
        break;
      case ExprOp::kAnd:
      case ExprOp::kOr:
      case ExprOp::kXor:
        require(expr.dtype != DType::kF32 && operand_dtype(0) == expr.dtype &&
                    operand_dtype(1) == expr.dtype,
                "bool or integer operands of the result's dtype");
        break;
      case ExprOp::kWhere:
        require(operand_dtype(0) == DType::kBool && operand_dtype(1) == expr.dtype &&
                    operand_dtype(2) == expr.dtype,
                "a bool condition and branches of the result's dtype");
        break;
      case ExprOp::kCast:
        break;
      case ExprOp::kLoadAt:
        GROVE_CHECK(expr.input >= 0 && expr.input < static_cast<int>(inputs.size()), what,
                    " loads input ", expr.input, " but the kernel has ", inputs.size(), " inputs");
        require(operand_dtype(0) == DType::kI64, "an i64 element offset");
        break;
      case ExprOp::kPhilox:
        require(expr.dtype == DType::kF32 && operand_dtype(0) == DType::kI64 &&
                    operand_dtype(1) == DType::kI64,
                "i64 seed and counter and an f32 result");
        break;
    }
  }

  auto check_expr_index = [&](int index, const std::string& what) {
    GROVE_CHECK(index >= 0 && index < static_cast<int>(exprs.size()), what, " uses expr ", index,
                " but the kernel has ", exprs.size(), " exprs");
  };
  for (size_t r = 0; r < reductions.size(); ++r) {
    const std::string what = str_cat(where, ": reduction ", r);
    check_expr_index(reductions[r].expr, what);
    const Expr& expr = exprs[reductions[r].expr];
    GROVE_CHECK_AS(DTypeError, expr.dtype == DType::kF32, what, " reduces an expr of dtype ",
                   expr.dtype, "; reductions accumulate f32 (cast first)");
    GROVE_CHECK(max_reduction_read[reductions[r].expr] < static_cast<int>(r), what,
                " reads reduction ", max_reduction_read[reductions[r].expr],
                "; a reduction may read only earlier reductions");
  }
  GROVE_CHECK(!outputs.empty(), where, ": expected at least one output, found none");
  if (!part_sizes.empty()) {
    verify_parts(*this, where);
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) {
      GROVE_CHECK(!inputs[i].shared_by_parts, where, ": input ", i,
                  " is shared_by_parts but the kernel has no parts (Note [Multi-part kernel "
                  "arguments])");
    }
    for (size_t o = 0; o < outputs.size(); ++o) {
      GROVE_CHECK(outputs[o].in_place_input < 0, where, ": output ", o,
                  " is in place but the kernel has no parts (Note [Multi-part kernel "
                  "arguments])");
    }
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    const OutputSpec& output = outputs[o];
    const std::string what = str_cat(where, ": output ", o);
    check_expr_index(output.expr, what);
    GROVE_CHECK_AS(DTypeError, is_memory_type(output.dtype), what, " has dtype ", output.dtype,
                   ", which kernels cannot store");
    if (output.per_row) {
      GROVE_CHECK(!reductions.empty(), what,
                  " is per_row but the kernel has no reductions; per-row outputs belong to "
                  "reduction kernels");
      GROVE_CHECK(!varies_along_row[output.expr], what, " is per_row but expr ", output.expr,
                  " varies along the reduced dimension; per-row values may read only reductions, "
                  "scalars, constants and loads broadcast along the last dimension");
    }
    const size_t output_rank = output.per_row ? rank - 1 : rank;
    GROVE_CHECK_AS(ShapeError, output.strides.size() == output_rank, what, " has strides ",
                   runtime::shape_str(output.strides), " of rank ", output.strides.size(),
                   ", expected rank ", output_rank, output.per_row ? " (per-row output)" : "");
    for (int64_t stride : output.strides) {
      GROVE_CHECK_AS(ShapeError, stride >= 0, what, " has a negative stride in ",
                     runtime::shape_str(output.strides));
    }
  }
}

}  // namespace grove::compiler::codegen
