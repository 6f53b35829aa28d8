#include "compiler/autodiff/gradient_rules.h"

#include <mutex>

namespace grove::compiler::autodiff {

void register_gradients() {
  static std::once_flag once;
  std::call_once(once, [] {
    detail::register_elementwise_gradients();
    detail::register_tensor_gradients();
  });
}

const std::map<std::string, std::string>& non_differentiable_ops() {
  static const std::map<std::string, std::string> ops = [] {
    std::map<std::string, std::string> reasons;
    for (const char* compare : {"lt", "le", "gt", "ge", "eq", "ne"}) {
      reasons[compare] = "its result is bool";
    }
    for (const char* bitwise : {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}) {
      reasons[bitwise] = "its operands are bool or integers";
    }
    for (const char* division : {"floor_divide", "remainder", "truncate_divide", "fmod"}) {
      reasons[division] = "its operands are integers";
    }
    reasons["nonzero"] = "its result is integer indices";
    reasons["sgd_momentum_update"] = "an in-place optimizer update, run after the backward";
    reasons["adamw_update"] = "an in-place optimizer update, run after the backward";
    reasons["gelu_backward"] = "it is gelu's gradient; second derivatives are not supported";
    reasons["layer_norm_backward"] =
        "it is layer_norm's gradient; second derivatives are not supported";
    reasons["attention"] =
        "it is lowered for inference; training writes attention out as matmul and softmax "
        "(Note [Fused attention op])";
    return reasons;
  }();
  return ops;
}

}  // namespace grove::compiler::autodiff
