// TreeConfig is everything a tree manager can be told: strictness, the limits
// on re-recording, and the dynamic-shape warning. Defaults follow PyTorch's
// CUDA Graph Trees; each field can be overridden by an environment variable
// (documented in README.md) through TreeConfig::from_environment().
#pragma once

#include <string>

#include "runtime/error.h"

namespace grove::cudagraph_trees {

struct TreeConfig {
  // GROVE_CUDAGRAPHS_STRICT=1: a function that would fall back to eager
  // execution throws NotCapturedError instead.
  bool strict = false;
  // GROVE_CUDAGRAPHS_RERECORD_LIMIT: re-recordings of one function under one
  // parent (parameter-address churn and new input shapes not counted) before
  // it runs eagerly there.
  int rerecord_limit = 128;
  // GROVE_CUDAGRAPHS_MANAGED_INPUT_LIMIT: changes of one pool-managed input's
  // address under one parent before that input is copied instead of checked.
  int managed_input_move_limit = 5;
  // GROVE_CUDAGRAPHS_SHAPE_WARN_LIMIT: recordings of one function under one
  // parent for distinct input shapes before a warning suggests padding.
  int shape_warn_limit = 8;

  // The defaults overridden by the environment; throws ConfigError naming the
  // variable for a malformed value.
  static TreeConfig from_environment();
  // Throws ConfigError when a field is out of range.
  void validate() const;
};

// A function would not be captured and TreeConfig::strict forbids the eager
// fallback. The message names the function and the reason.
class NotCapturedError : public Error {
 public:
  using Error::Error;
};

}  // namespace grove::cudagraph_trees
