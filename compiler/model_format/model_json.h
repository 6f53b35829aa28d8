// grove's JSON model format: reading a model into a Program and writing a
// Program back out.
//
//   {"name": "mlp", "dims": {"batch": 1},
//    "inputs":  [{"name": "x", "shape": ["batch", 512], "dtype": "f32"}],
//    "params":  [{"name": "w", "shape": [512, 512], "dtype": "f32",
//                 "init": {"kind": "normal", "std": 0.02, "seed": 1}}],
//    "buffers": [...same as params...],
//    "nodes":   [{"name": "fc0", "op": "linear", "inputs": ["x", "w", "b"],
//                 "attrs": {...}}],
//    "outputs": ["fc0"]}
//
// Shapes and int / int-list attributes may name a dimension of "dims"; the
// values bound at load time override the defaults. Init kinds: zeros, ones,
// constant (value), normal (mean, std), uniform (low, high), tril; seed
// defaults to 0. A node's results are named after the node ("fc0"; multi-result
// nodes "<node>.0", "<node>.1", ... unless "results" lists names). The
// program's call order is inputs, then params, then buffers.
//
// Export writes concrete shapes (the dims as bound) and every attribute, so
// load(export(p)) == p.
//
// Every malformed model throws ModelFormatError naming the node (or input)
// and the field: unknown op, missing field, wrong type, unknown value name,
// use before definition (which also rules out cycles), duplicate names, bad
// shapes, more than kMaxElements elements, nesting deeper than kMaxJsonDepth.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "compiler/ir/program.h"

namespace grove::compiler::model_format {

inline constexpr int kMaxJsonDepth = 16;
// Model files larger than this are refused before they are read (a grove
// model is a few KB of JSON; weights live elsewhere). GROVE_MODEL_MAX_BYTES
// overrides it.
inline constexpr int64_t kDefaultMaxModelBytes = int64_t{64} << 20;
int64_t max_model_bytes();

// Note [Model JSON bounded at parse time]: every reader of model text goes
// through parse_model_json, which stops at kMaxJsonDepth levels while parsing
// (nlohmann's parser keeps its own stack), so nothing afterwards (the loader,
// a dtype rewrite, dump()) walks a document deeper than that. Guarded by
// ModelFormat.DeepJsonIsRejectedWhileParsing and
// GroveErrors.DeepModelWithDtypeIsRejected.
nlohmann::json parse_model_json(const std::string& json_text);
// The text of model file `path`: a regular file of at most max_model_bytes().
// Throws ModelFormatError naming the path otherwise ("is a directory", "is not
// a regular file", too large, unreadable).
std::string read_model_file(const std::string& path);

using DimBindings = std::map<std::string, int64_t>;

ir::Program load_model(const std::string& json_text, const DimBindings& dims = {},
                       ir::Device device = runtime::kCpuDevice);
ir::Program load_model_file(const std::string& path, const DimBindings& dims = {},
                            ir::Device device = runtime::kCpuDevice);
// Pretty-printed JSON (2-space indent) of `program`.
std::string export_model(const ir::Program& program);

}  // namespace grove::compiler::model_format
