// Which GEMMs with few rows run as grove's small-M kernel (Note [Small-M GEMM
// selection], small_m_gemm.cc): a compile's own choice, else the process's
// GROVE_SMALL_M_GEMM.
#pragma once

#include <optional>
#include <string>

namespace grove::compiler::lowering {

enum class SmallMGemmMode { kOff, kOn, kAuto };

// "off" | "on" | "auto" ("" is auto); anything else throws ConfigError naming
// `source` (the variable or option the text came from) and the values it takes.
SmallMGemmMode parse_small_m_gemm_mode(const std::string& text, const std::string& source);

// `requested` when given (a compile's own option: LowerOptions::small_m_gemm),
// else GROVE_SMALL_M_GEMM (off | on | auto; unset or empty: auto).
SmallMGemmMode small_m_gemm_mode(std::optional<SmallMGemmMode> requested = std::nullopt);

}  // namespace grove::compiler::lowering
