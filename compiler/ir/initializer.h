// Initializer says how a param's or buffer's initial value is made: zeros,
// ones, a constant, normal(mean, std), uniform(low, high), or a causal mask
// (`tril`: 1 on and below the diagonal of the last two dimensions, 0 above).
// Random kinds are seeded and reproducible on every platform: values come
// from the Philox counter-based generator (compiler/ops/philox.h), element i
// drawing from counter i, so a device and the reference agree bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compiler/ir/tensor_type.h"

namespace grove::compiler::ir {

enum class InitKind : uint8_t { kZeros, kOnes, kConstant, kNormal, kUniform, kTril };

const char* init_kind_name(InitKind kind);  // "zeros", "ones", "constant", ...
// Parses init_kind_name's names; returns false for anything else.
bool parse_init_kind(const std::string& name, InitKind* kind);

struct Initializer {
  InitKind kind = InitKind::kZeros;
  double value = 0;  // kConstant
  double mean = 0;   // kNormal
  double std = 1;    // kNormal
  double low = 0;    // kUniform
  double high = 1;   // kUniform
  uint64_t seed = 0;

  friend bool operator==(const Initializer&, const Initializer&) = default;
  std::string str() const;  // "normal(mean=0, std=0.02, seed=7)"
};

// The initial values (as doubles, before rounding to the dtype) of a value of
// `type` initialized by `init`. Integer and bool dtypes get the values rounded
// toward zero / tested against zero when they are materialized.
std::vector<double> initial_values(const Initializer& init, const TensorType& type);
// Elements [first, first + out.size()) of initial_values(init, type), written
// to `out`: a large value is made a chunk at a time (Note [Parameters made in
// chunks], compiler/backends/compile.cc).
void initial_values_range(const Initializer& init, const TensorType& type, int64_t first,
                          std::span<double> out);

}  // namespace grove::compiler::ir
