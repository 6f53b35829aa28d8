// The table of gradient-check cases: at least one small program per op that
// has a gradient rule, shared by the check on the float64 reference
// interpreter (gradient_check_test.cc) and the check of sim's kernels against
// f64 finite differences (sim_gradient_check_test.cc). Each case builds `y`; build_case_model adds
// loss = sum(y * projection) with a fixed random projection, so every element
// of y matters differently.
//
//   for (const GradientCase& c : gradient_cases()) {
//     CaseModel m = build_case_model(c, runtime::kSimDevice, ir::DType::kF32);
//     ...  // finite differences of m.loss against its backward's gradients
//   }
#pragma once

#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"

namespace grove::compiler::autodiff {

// A ProgramBuilder that knows the floating dtype of the case's params.
class CaseBuilder : public ir::ProgramBuilder {
 public:
  CaseBuilder(std::string name, runtime::Device device, ir::DType dtype)
      : ProgramBuilder(std::move(name), device), dtype(dtype) {}
  const ir::DType dtype;
};

// Every param of a case is filled uniformly from [low, high]; with `signed_`,
// each value's sign is flipped at random (so [0.1, 1] keeps away from 0).
struct Range {
  double low = -1;
  double high = 1;
  bool signed_ = false;
};

struct GradientCase {
  std::string name;
  std::string op;  // the op whose rule this case checks
  std::function<ir::ValueId(CaseBuilder&)> build;
  Range range;
};

// gtest prints a case by its name.
inline void PrintTo(const GradientCase& test_case, std::ostream* out) { *out << test_case.name; }

const std::vector<GradientCase>& gradient_cases();

struct CaseModel {
  ir::Program model;
  ir::ValueId loss = ir::kNoValue;
};

// The case's program on `device` with params of `dtype` and the projected loss.
CaseModel build_case_model(const GradientCase& test_case, runtime::Device device, ir::DType dtype);

// The ops with a gradient rule that no case checks (empty when complete).
std::set<std::string> ops_without_a_case();

}  // namespace grove::compiler::autodiff
