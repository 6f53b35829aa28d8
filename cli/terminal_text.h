// Text from a model file (its name, messages that quote it) on its way to the
// terminal: control bytes are written as \xNN, so a model cannot move the
// cursor, change colours or clear the screen of the person running grove.
#pragma once

#include <string>
#include <string_view>

namespace grove::cli {

// `text` with every byte below 0x20 (tab and newline included) and 0x7f
// written as "\xNN"; other bytes, UTF-8 included, unchanged.
std::string printable(std::string_view text);

}  // namespace grove::cli
