#include "compiler/ir/initializer.h"

#include <sstream>

#include "compiler/ops/philox.h"
#include "runtime/error.h"

namespace grove::compiler::ir {

const char* init_kind_name(InitKind kind) {
  switch (kind) {
    case InitKind::kZeros:
      return "zeros";
    case InitKind::kOnes:
      return "ones";
    case InitKind::kConstant:
      return "constant";
    case InitKind::kNormal:
      return "normal";
    case InitKind::kUniform:
      return "uniform";
    case InitKind::kTril:
      return "tril";
  }
  return "?";
}

bool parse_init_kind(const std::string& name, InitKind* kind) {
  for (InitKind candidate : {InitKind::kZeros, InitKind::kOnes, InitKind::kConstant,
                             InitKind::kNormal, InitKind::kUniform, InitKind::kTril}) {
    if (name == init_kind_name(candidate)) {
      *kind = candidate;
      return true;
    }
  }
  return false;
}

std::string Initializer::str() const {
  std::ostringstream stream;
  stream << init_kind_name(kind);
  switch (kind) {
    case InitKind::kConstant:
      stream << "(value=" << value << ")";
      break;
    case InitKind::kNormal:
      stream << "(mean=" << mean << ", std=" << std << ", seed=" << seed << ")";
      break;
    case InitKind::kUniform:
      stream << "(low=" << low << ", high=" << high << ", seed=" << seed << ")";
      break;
    default:
      break;
  }
  return stream.str();
}

void initial_values_range(const Initializer& init, const TensorType& type, int64_t first,
                          std::span<double> out) {
  const int64_t count = type.numel();
  GROVE_CHECK(count >= 0, "initial_values: type ", type.str(), " has a dynamic dimension");
  GROVE_CHECK(
      first >= 0 && static_cast<uint64_t>(first) + out.size() <= static_cast<uint64_t>(count),
      "initial_values: elements [", first, ", ", first + static_cast<int64_t>(out.size()),
      ") lie outside ", type.str());
  int64_t rows = 0;
  int64_t cols = 0;
  if (init.kind == InitKind::kTril) {
    GROVE_CHECK(type.rank() >= 2, "tril initializer needs a value of rank >= 2, found ",
                type.str());
    cols = type.shape.back();
    rows = type.shape[type.shape.size() - 2];
  }
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t i = first + static_cast<int64_t>(k);
    double& value = out[k];
    auto counter = static_cast<uint64_t>(i);
    switch (init.kind) {
      case InitKind::kZeros:
        value = 0;
        break;
      case InitKind::kOnes:
        value = 1;
        break;
      case InitKind::kConstant:
        value = init.value;
        break;
      case InitKind::kNormal:
        value = init.mean + init.std * ops::philox_normal(init.seed, counter);
        break;
      case InitKind::kUniform:
        value = init.low + (init.high - init.low) * ops::philox_uniform_double(init.seed, counter);
        break;
      case InitKind::kTril: {
        int64_t within = i % (rows * cols);
        value = (within % cols) <= (within / cols) ? 1 : 0;
        break;
      }
    }
  }
}

std::vector<double> initial_values(const Initializer& init, const TensorType& type) {
  int64_t count = type.numel();
  GROVE_CHECK(count >= 0, "initial_values: type ", type.str(), " has a dynamic dimension");
  std::vector<double> values(static_cast<size_t>(count));
  initial_values_range(init, type, 0, values);
  return values;
}

}  // namespace grove::compiler::ir
