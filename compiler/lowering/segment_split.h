// The last stages of scheduling: which slots each step reads and defines, the
// split of the steps into capturable and non-capturable segments (Note [Values
// across segments] in lower.h), and where each slot's tensor is released.
#pragma once

#include <vector>

#include "compiler/lowering/scheduler.h"

namespace grove::compiler::lowering {

// The slots `step` reads (they must be defined before it) and defines.
void step_slots(const Step& step, std::vector<int>* reads, std::vector<int>* defines);

// Fills program.segments from program.steps: a new segment starts at every
// step that cannot be captured in `mode`, and after it.
void split_segments(ScheduledProgram& program, ops::ExecMode mode);

// Sets each step's `release`: the slots nothing after it reads, except the
// program's and the segments' outputs.
void compute_releases(ScheduledProgram& program);

}  // namespace grove::compiler::lowering
