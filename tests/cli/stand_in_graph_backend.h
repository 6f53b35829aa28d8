// A stand-in for the "cudagraphs" backend, for testing the `grove` command's
// graph reporting before (or without) the real backend: it hands each
// inference program, as one function, to the calling thread's tree manager of
// its device (warm-up, recording, replay) and runs training programs eagerly.
// It is registered only when no "cudagraphs" backend is, so a build that
// links the real one tests the real one.
#pragma once

namespace grove::cli::testing {

// Registers the stand-in as "cudagraphs" unless that name is taken; returns
// whether it did.
bool register_stand_in_graph_backend();

}  // namespace grove::cli::testing
