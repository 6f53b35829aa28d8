// The `grove` command with the stand-in "cudagraphs" backend registered when
// the build has no real one (stand_in_graph_backend.h).
#include "cli/main_entry.h"
#include "tests/cli/stand_in_graph_backend.h"

int main(int argc, char** argv) {
  grove::cli::testing::register_stand_in_graph_backend();
  return grove::cli::grove_main(argc, argv);
}
