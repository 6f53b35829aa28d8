// The `grove` command's entry point: `grove run MODEL.json`, `grove demo`,
// `grove help`. Every error ends the command with one line "grove: error: ..."
// on stderr and a non-zero status (2 for a malformed command line, 1 otherwise).
#pragma once

namespace grove::cli {

int grove_main(int argc, char** argv);

}  // namespace grove::cli
