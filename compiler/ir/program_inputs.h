// A program rewritten node by node starts as an empty copy of the old one:
// its name, device and dims, and its inputs in call order. Passes that drop
// or add nodes (distributed/gradient_all_reduce.cc,
// distributed/deferred_all_reduce.cc, compiler/lowering/
// grouped_attention_keys.cc) start here and fill `ids` as they re-add the
// old program's nodes.
#pragma once

#include <vector>

#include "compiler/ir/program.h"

namespace grove::compiler::ir {

// The new program; `ids` is resized to `from`'s values and maps each of
// `from`'s inputs to the new program's (every other value: kNoValue).
Program program_with_inputs_of(const Program& from, std::vector<ValueId>& ids);

}  // namespace grove::compiler::ir
