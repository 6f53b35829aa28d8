// The programmatic-dependent-launch form of a generated kernel's PTX: Note
// [Programmatic generated kernels].
#pragma once

#include <string>

namespace grove::compiler::codegen {

// Note [Programmatic generated kernels]: in a graph a kernel node starts only
// once the node before it has ended and its writes are flushed, so every
// generated kernel (a layer norm, a GELU, a copy: 1.5 to 3 us each at the
// zoo's sizes) paid its launch and its grid's ramp with the SMs idle (Note
// [Programmatic dependent launch], runtime/cuda/cuda_platform.cc, which does
// this for the runtime's decode kernels). This is the kernel's PTX for
// compute capability 9.0 (.target sm_90, PTX ISA 7.8) with `griddepcontrol.wait`
// as each entry's first instruction: the kernel may be started while the one
// before it drains and waits, before touching any memory, until that one has
// completed and its writes are visible, so results are the same bits. It never
// calls launch_dependents, so the kernel after it starts when it ends (rule (2)
// of that Note). Off by default: on an H100 (session 18, round 1, ViT at batch
// 16, one process) the call took 641 us against 624 without it (GPU time 586
// against 580 us; not explained: a guess is that after cuBLAS's kernels, which
// never trigger early, only the launch overlaps). cuda loads it on 9.0+ devices
// (GROVE_PROGRAMMATIC_LAUNCH=0: never); GROVE_PROGRAMMATIC_GENERATED=0 leaves generated kernels
// plain. Tests: Ptx.ProgrammaticFormWaitsFirstAndIsAcceptedByPtxasForSm90
// (tests/compiler/codegen/ptx_test.cc), and on cuda the zoo's grove_vs_eager.
std::string programmatic_ptx(const std::string& ptx);

// Whether generated kernels get their programmatic form (GROVE_PROGRAMMATIC_GENERATED,
// read at each kernel compile, so one process can compare both).
bool programmatic_generated_enabled();

}  // namespace grove::compiler::codegen
