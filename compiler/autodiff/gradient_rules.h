// The gradient rule of every differentiable op, registered into
// OpRegistry::global() through OpRegistry::set_gradient.
//
// Registration is explicit: register_gradients() fills the rules once per
// process (later calls do nothing) and build_training_programs calls it, so
// no static initializer and no alwayslink is needed.
//
// Which ops have no rule, and why, is non_differentiable_ops(): ops whose
// results are never floating (comparisons, nonzero) and the in-place optimizer
// updates, through which a loss cannot be differentiated. Every other op has a
// rule; the autodiff tests check both lists against the registry.
#pragma once

#include <map>
#include <string>

namespace grove::compiler::autodiff {

void register_gradients();

// op name -> why it has no gradient rule.
const std::map<std::string, std::string>& non_differentiable_ops();

namespace detail {
void register_elementwise_gradients();
void register_tensor_gradients();
}  // namespace detail

}  // namespace grove::compiler::autodiff
