// `decode load`: the decode benchmark's open-loop serving load through
// LlmService (decode_load.cc says what it measures). The decode binary runs
// it for its first argument "load".
#pragma once

namespace grove::benchmarks {

// main()'s arguments after "load"; argv[0] names the mode.
int run_decode_load(int argc, char** argv);

}  // namespace grove::benchmarks
