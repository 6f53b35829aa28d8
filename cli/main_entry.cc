#include "cli/main_entry.h"

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/paths.h"
#include "cli/terminal_text.h"

namespace grove::cli {
namespace {

constexpr const char* kCommandList = "run, demo, serve, generate, export-weights, help";

int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fputs(overview_text().c_str(), stderr);
    return 2;
  }
  const std::string& command = args.front();
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "help" || command == "--help" || command == "-h") {
    if (rest.empty()) {
      std::fputs(overview_text().c_str(), stdout);
      return 0;
    }
    if (rest.size() == 1 && rest[0] == "run") return run_command({"--help"});
    if (rest.size() == 1 && rest[0] == "demo") return demo_command({"--help"});
    if (rest.size() == 1 && rest[0] == "export-weights") return export_weights_command({"--help"});
    if (rest.size() == 1 && rest[0] == "serve") return serve_command({"--help"});
    if (rest.size() == 1 && rest[0] == "generate") return generate_command({"--help"});
    throw UsageError(str_cat("help: unknown command '", rest[0], "'; commands: ", kCommandList));
  }
  if (command == "run") return run_command(rest);
  if (command == "demo") return demo_command(rest);
  if (command == "export-weights") return export_weights_command(rest);
  if (command == "serve") return serve_command(rest);
  if (command == "generate") return generate_command(rest);
  throw UsageError(
      str_cat("unknown command '", command, "'; commands: ", kCommandList, " (see grove --help)"));
}

// One line: newlines in nested messages become "; ", other control bytes
// (from a model's names) are escaped.
std::string one_line(std::string message) {
  for (size_t at = message.find('\n'); at != std::string::npos; at = message.find('\n', at)) {
    message.replace(at, 1, "; ");
  }
  while (!message.empty() && (message.back() == ' ' || message.back() == ';')) message.pop_back();
  return printable(message);
}

}  // namespace

std::string overview_text() {
  std::string text =
      "usage: grove <command> [options]\n\n"
      "grove records a tensor JIT's work into a tree of CUDA graphs (on a GPU, or on the sim\n"
      "device that emulates CUDA on the host).\n\ncommands:\n";
  for (const CommandSpec* spec : {&run_command_spec(), &demo_command_spec(), &serve_command_spec(),
                                  &generate_command_spec(), &export_weights_command_spec()}) {
    std::string left = spec->name + (spec->positional.empty() ? "" : " " + spec->positional);
    text += "  " + left + std::string(left.size() < 16 ? 16 - left.size() : 1, ' ') +
            spec->summary + "\n";
  }
  text +=
      "  help [COMMAND]  show this message, or a command's options\n\n"
      "Run 'grove <command> --help' for a command's options.\n";
  return text;
}

int grove_main(int argc, char** argv) {
  set_program_path(argc > 0 ? argv[0] : "");
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  try {
    return dispatch(args);
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "grove: error: out of host memory (std::bad_alloc); the model, --batch or "
                 "--seq asks for more memory than this machine has: try smaller sizes\n");
    return 1;
  } catch (const UsageError& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "grove: error: %s\n", one_line(error.what()).c_str());
    return 2;
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "grove: error: %s\n", one_line(error.what()).c_str());
    return 1;
  }
}

}  // namespace grove::cli
