// Grouped-query keys read whole: a program rewrite, run before lowering, that
// lets attention read the key and value heads that a grouped-query model
// repeated for it (HF's repeat_kv) once each.
#pragma once

#include <optional>

#include "compiler/ir/program.h"

namespace grove::compiler::lowering {

// Note [Grouped-query keys read whole]
// HF's LLaMA (and every model with fewer key heads than query heads) repeats
// each key and value head for the query heads of its group before attention:
// x [..., G, T, D] is unsqueezed to [..., G, 1, T, D], expanded to
// [..., G, R, T, D] and reshaped to [..., G * R, T, D]. The importer writes the
// expand as x + full(0, [..., G, R, T, D]), so each repeat was a kernel
// writing R copies (session 23 r1, H200: LLaMA b16's four such kernels, 1.2 us
// each). grove's attention reads grouped-query keys itself (query head h reads
// key head h / (H / G): the repeat's order), so where both its key and value
// are such repeats, this rewrite passes it x instead; the repeats, read by
// nothing else, are dropped. x + 0 and x differ only in the sign of a zero
// (-0 + 0 = +0), which no product or sum of attention can tell apart from 0.
// GROVE_GROUPED_ATTENTION_KEYS=0 keeps the repeats (the path before). Tests:
// GroupedAttentionKeys.* (tests/compiler/lowering/grouped_attention_keys_test.cc).
bool grouped_attention_keys_enabled();

// The rewritten program, or nullopt where no attention reads repeated heads.
// Inputs, their order and outputs are kept.
std::optional<ir::Program> read_grouped_attention_keys(const ir::Program& program);

}  // namespace grove::compiler::lowering
