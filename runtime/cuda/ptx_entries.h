// One kernel's PTX out of a module of many (Note [One entry of a PTX module]).
// Text only: no CUDA call.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace grove::runtime::cuda_detail {

// `module` with every .entry definition but `entry`'s left out; its
// directives, declarations and .func definitions are kept as they are.
// nullopt when the module has no other entry, has no entry named `entry`,
// or defines module-scope .global variables (which entries would no longer
// share) - then the module is loaded whole.
std::optional<std::string> ptx_with_only_entry(std::string_view module, std::string_view entry);

// Whether GROVE_PTX_ONE_ENTRY is not 0 (on by default).
bool one_entry_per_module_enabled();

}  // namespace grove::runtime::cuda_detail
