// The `grove` command (main_entry.h).
#include "cli/main_entry.h"

int main(int argc, char** argv) { return grove::cli::grove_main(argc, argv); }
