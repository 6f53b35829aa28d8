#include "compiler/model_format/model_json.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "compiler/ir/generator_state.h"
#include "compiler/ops/op_registry.h"
#include "runtime/error.h"

namespace grove::compiler::model_format {

using nlohmann::json;

namespace {

// Where in the model a problem is: "node 'fc0'", "params[1] 'w'", ... plus the field.
struct Location {
  std::string model;
  std::string object;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw ModelFormatError(
        str_cat("model '", model, "', ", object, ", field '", field, "': ", what));
  }
};

std::string type_name(const json& value) { return value.type_name(); }

const json& require_field(const json& object, const char* field, const Location& where) {
  auto found = object.find(field);
  if (found == object.end()) where.fail(field, "is missing");
  return *found;
}

void check_fields(const json& object, const std::set<std::string>& allowed, const Location& where) {
  for (const auto& [key, unused] : object.items()) {
    if (allowed.count(key) == 0) {
      std::string list;
      for (const std::string& name : allowed) list += (list.empty() ? "" : ", ") + name;
      where.fail(key, str_cat("is not a known field (expected ", list, ")"));
    }
  }
}

std::string require_string(const json& object, const char* field, const Location& where) {
  const json& value = require_field(object, field, where);
  if (!value.is_string()) where.fail(field, str_cat("must be a string, found ", type_name(value)));
  return value.get<std::string>();
}

class Loader {
 public:
  Loader(const DimBindings& bindings, ir::Device device) : bindings_(bindings), device_(device) {}

  ir::Program load(const json& model);

 private:
  int64_t dim_value(const json& entry, const std::string& field, const Location& where) const;
  ir::Shape parse_shape(const json& entry, const Location& where) const;
  ir::Initializer parse_init(const json& entry, const Location& where) const;
  void declare_inputs(const json& model, const char* section, ir::ValueKind kind,
                      ir::Program& program) const;
  ir::AttrValue parse_attr(const json& value, ir::AttrKind kind, const std::string& field,
                           const Location& where) const;
  void add_node(const json& entry, size_t index, ir::Program& program) const;

  DimBindings bindings_;
  ir::Device device_;
  std::string model_name_ = "?";
  DimBindings dims_;
  std::map<std::string, std::string> later_definitions_;  // result name -> node, not yet added
};

int64_t Loader::dim_value(const json& entry, const std::string& field,
                          const Location& where) const {
  if (entry.is_string()) {
    // Note [Dimension products]: "batch*24" is the product of its factors,
    // each a declared dimension or a positive integer (an exported program's
    // [batch * seq] reshape). Test: ModelJsonDims.ProductsOfDimensionsAndIntegers.
    const std::string text = entry.get<std::string>();
    if (text.find('*') == std::string::npos) {
      auto found = dims_.find(text);
      if (found == dims_.end()) {
        where.fail(field,
                   str_cat("names the dimension \"", text, "\", which \"dims\" does not declare"));
      }
      return found->second;
    }
    int64_t product = 1;
    size_t start = 0;
    while (true) {
      const size_t star = text.find('*', start);
      const std::string factor =
          text.substr(start, star == std::string::npos ? star : star - start);
      int64_t value = 0;
      if (!factor.empty() && factor.find_first_not_of("0123456789") == std::string::npos &&
          factor.size() <= 12) {
        value = std::stoll(factor);
      } else {
        auto found = dims_.find(factor);
        if (found == dims_.end()) {
          where.fail(field, str_cat("names the dimension \"", factor,
                                    "\", which \"dims\" does not declare"));
        }
        value = found->second;
      }
      if (value <= 0 || product > ir::kMaxElements / value) {
        where.fail(field, str_cat("is \"", text, "\": a product beyond the largest size (",
                                  ir::kMaxElements, " elements) or with a factor below 1"));
      }
      product *= value;
      if (star == std::string::npos) break;
      start = star + 1;
    }
    return product;
  }
  if (!entry.is_number_integer()) {
    where.fail(field, str_cat("must be an integer or a dimension name, found ", type_name(entry),
                              " ", entry.dump()));
  }
  if (entry.is_number_unsigned() &&
      entry.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    where.fail(field, str_cat("is ", entry.get<uint64_t>(), ", beyond the largest size (",
                              ir::kMaxElements, " elements per value)"));
  }
  return entry.get<int64_t>();
}

// Edit distance between two op names (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "did you mean 'gelu' or 'relu'?" for the closest registered names, else the list.
std::string closest_ops(const std::string& op, const std::vector<std::string>& known) {
  size_t best = std::numeric_limits<size_t>::max();
  for (const std::string& name : known) best = std::min(best, edit_distance(op, name));
  std::string names;
  if (best <= std::max<size_t>(2, op.size() / 3)) {
    for (const std::string& name : known) {
      if (edit_distance(op, name) == best) names += (names.empty() ? "'" : ", '") + name + "'";
    }
    return str_cat("did you mean ", names, "?");
  }
  for (const std::string& name : known) names += (names.empty() ? "" : ", ") + name;
  return str_cat("known ops: ", names);
}

ir::Shape Loader::parse_shape(const json& entry, const Location& where) const {
  const json& shape_json = require_field(entry, "shape", where);
  if (!shape_json.is_array()) {
    where.fail("shape", str_cat("must be an array of sizes, found ", type_name(shape_json)));
  }
  ir::Shape shape;
  int64_t numel = 1;
  for (size_t d = 0; d < shape_json.size(); ++d) {
    std::string field = str_cat("shape[", d, "]");
    int64_t size = dim_value(shape_json[d], field, where);
    if (size < 0) where.fail(field, str_cat("is negative (", size, ")"));
    if (size > 0 && numel > ir::kMaxElements / size) {
      where.fail("shape", str_cat("has more than 2^31 elements; grove limits a value to ",
                                  ir::kMaxElements, " elements"));
    }
    numel *= size;
    shape.push_back(size);
  }
  return shape;
}

// The largest finite magnitude of a floating dtype; 0 for other dtypes.
double largest_finite(runtime::DType dtype) {
  switch (dtype) {
    case runtime::DType::kF16:
      return 65504.0;
    case runtime::DType::kBF16:
      return 3.3895313892515355e38;
    case runtime::DType::kF32:
      return static_cast<double>(std::numeric_limits<float>::max());
    case runtime::DType::kF64:
      return std::numeric_limits<double>::max();
    default:
      return 0;
  }
}

// An initializer whose parameters the dtype cannot hold gives inf or NaN
// parameters (and a training run that prints -nan): refuse it up front.
void check_representable(const ir::Initializer& init, runtime::DType dtype, const Location& where) {
  const double limit = largest_finite(dtype);
  if (limit == 0) return;
  auto check = [&](const char* field, double value) {
    if (std::isfinite(value) && std::abs(value) <= limit) return;
    where.fail(
        str_cat("init.", field),
        str_cat("is ", value, ", which ", runtime::dtype_name(dtype),
                " cannot hold (its largest finite value is ", limit, "); choose a smaller value"));
  };
  switch (init.kind) {
    case ir::InitKind::kConstant:
      check("value", init.value);
      break;
    case ir::InitKind::kNormal:
      check("mean", init.mean);
      check("std", init.std);
      // Six standard deviations cover every draw the generator makes in practice.
      check("std", std::abs(init.mean) + 6 * init.std);
      break;
    case ir::InitKind::kUniform:
      check("low", init.low);
      check("high", init.high);
      break;
    default:
      break;
  }
}

double number_field(const json& init, const char* field, double fallback, const Location& where) {
  auto found = init.find(field);
  if (found == init.end()) return fallback;
  if (!found->is_number()) {
    where.fail(str_cat("init.", field), str_cat("must be a number, found ", type_name(*found)));
  }
  return found->get<double>();
}

ir::Initializer Loader::parse_init(const json& entry, const Location& where) const {
  const json& init = require_field(entry, "init", where);
  if (!init.is_object()) where.fail("init", str_cat("must be an object, found ", type_name(init)));
  Location inner = where;
  check_fields(init, {"kind", "value", "mean", "std", "low", "high", "seed"}, inner);
  ir::Initializer result;
  std::string kind = require_string(init, "kind", where);
  if (!ir::parse_init_kind(kind, &result.kind)) {
    where.fail("init.kind", str_cat("'", kind,
                                    "' is not an initializer; use zeros, ones, constant, normal, "
                                    "uniform or tril"));
  }
  result.value = number_field(init, "value", 0, where);
  result.mean = number_field(init, "mean", 0, where);
  result.std = number_field(init, "std", 1, where);
  result.low = number_field(init, "low", 0, where);
  result.high = number_field(init, "high", 1, where);
  if (auto seed = init.find("seed"); seed != init.end()) {
    if (!seed->is_number_unsigned()) {
      where.fail("init.seed", str_cat("must be a non-negative integer, found ", seed->dump()));
    }
    result.seed = seed->get<uint64_t>();
  }
  if (result.kind == ir::InitKind::kNormal && !(result.std >= 0)) {
    where.fail("init.std", "must be >= 0");
  }
  if (result.kind == ir::InitKind::kUniform && !(result.low <= result.high)) {
    where.fail("init.high", "must be >= init.low");
  }
  if (result.kind == ir::InitKind::kConstant && init.find("value") == init.end()) {
    where.fail("init.value", "is missing (a constant initializer needs a value)");
  }
  return result;
}

void Loader::declare_inputs(const json& model, const char* section, ir::ValueKind kind,
                            ir::Program& program) const {
  auto found = model.find(section);
  if (found == model.end()) return;
  Location top{model_name_, "the model"};
  if (!found->is_array()) top.fail(section, str_cat("must be an array, found ", type_name(*found)));
  for (size_t i = 0; i < found->size(); ++i) {
    const json& entry = (*found)[i];
    Location where{model_name_, str_cat(section, "[", i, "]")};
    if (!entry.is_object()) where.fail(section, "each entry must be an object");
    std::string name = require_string(entry, "name", where);
    where.object = str_cat(section, "[", i, "] '", name, "'");
    bool persistent = kind != ir::ValueKind::kInput;
    check_fields(entry,
                 persistent ? std::set<std::string>{"name", "shape", "dtype", "init"}
                            : std::set<std::string>{"name", "shape", "dtype"},
                 where);
    ir::TensorType type;
    type.shape = parse_shape(entry, where);
    type.device = device_;
    if (entry.contains("dtype")) {
      std::string dtype = require_string(entry, "dtype", where);
      try {
        type.dtype = runtime::parse_dtype(dtype);
      } catch (const DTypeError& error) {
        where.fail("dtype", error.what());
      }
    }
    std::optional<ir::Initializer> init;
    if (persistent) {
      init = parse_init(entry, where);
      check_representable(*init, type.dtype, where);
    }
    if (program.has_name(name)) where.fail("name", "is already defined; names must be unique");
    program.add_input(name, type, kind, init);
  }
}

ir::AttrValue Loader::parse_attr(const json& value, ir::AttrKind kind, const std::string& field,
                                 const Location& where) const {
  switch (kind) {
    case ir::AttrKind::kInt:
      return dim_value(value, field, where);
    case ir::AttrKind::kFloat:
      if (!value.is_number()) {
        where.fail(field, str_cat("must be a number, found ", type_name(value)));
      }
      return value.get<double>();
    case ir::AttrKind::kInts: {
      if (!value.is_array()) {
        where.fail(field, str_cat("must be an array of integers, found ", type_name(value)));
      }
      std::vector<int64_t> list;
      for (size_t i = 0; i < value.size(); ++i) {
        list.push_back(dim_value(value[i], str_cat(field, "[", i, "]"), where));
      }
      return list;
    }
    case ir::AttrKind::kString:
      if (!value.is_string()) {
        where.fail(field, str_cat("must be a string, found ", type_name(value)));
      }
      return value.get<std::string>();
  }
  where.fail(field, "has an unsupported kind");
}

void Loader::add_node(const json& entry, size_t index, ir::Program& program) const {
  Location where{model_name_, str_cat("nodes[", index, "]")};
  if (!entry.is_object()) where.fail("nodes", "each node must be an object");
  std::string name = require_string(entry, "name", where);
  where.object = str_cat("node '", name, "'");
  check_fields(entry, {"name", "op", "inputs", "attrs", "results"}, where);
  std::string op = require_string(entry, "op", where);
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  const ops::OpDef* def = registry.find(op);
  if (def == nullptr) {
    where.fail(
        "op", str_cat("'", op, "' is not a registered op; ", closest_ops(op, registry.op_names())));
  }
  if (program.find_node(name)) where.fail("name", "is already used by another node");

  const json& inputs = require_field(entry, "inputs", where);
  if (!inputs.is_array())
    where.fail("inputs", str_cat("must be an array of value names, found ", type_name(inputs)));
  ops::OpContext context;
  context.node_name = name;
  context.op = op;
  context.device = device_;
  std::vector<ir::ValueId> operands;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string field = str_cat("inputs[", i, "]");
    if (!inputs[i].is_string())
      where.fail(field, str_cat("must be a value name, found ", type_name(inputs[i])));
    std::string value_name = inputs[i].get<std::string>();
    std::optional<ir::ValueId> id = program.find_value(value_name);
    if (!id) {
      auto later = later_definitions_.find(value_name);
      if (later == later_definitions_.end() && value_name.find('.') != std::string::npos) {
        later =
            later_definitions_.find(value_name.substr(0, value_name.rfind('.')));  // "<node>.<i>"
      }
      if (later != later_definitions_.end()) {
        where.fail(field, str_cat("uses '", value_name, "' before node '", later->second,
                                  "' defines it; list nodes in dependency order (cycles are "
                                  "not allowed)"));
      }
      where.fail(field, str_cat("names '", value_name,
                                "', which is not an input, param, buffer "
                                "or node result of the model"));
    }
    operands.push_back(*id);
    context.operand_types.push_back(program.value(*id).type);
    context.operand_names.push_back(value_name);
  }

  ir::Attributes attrs;
  if (auto found = entry.find("attrs"); found != entry.end()) {
    if (!found->is_object())
      where.fail("attrs", str_cat("must be an object, found ", type_name(*found)));
    for (const auto& [key, value] : found->items()) {
      auto spec =
          std::find_if(def->attrs.begin(), def->attrs.end(),
                       [&](const ops::AttrSpec& candidate) { return candidate.name == key; });
      if (spec == def->attrs.end()) {
        std::string accepted;
        for (const ops::AttrSpec& candidate : def->attrs)
          accepted += (accepted.empty() ? "" : ", ") + candidate.name;
        where.fail("attrs." + key, str_cat("is not an attribute of ", op, " (it takes ",
                                           accepted.empty() ? "none" : accepted, ")"));
      }
      attrs.set(key, parse_attr(value, spec->kind, "attrs." + key, where));
    }
  }
  if (op == "dropout" && operands.size() == 1) {
    // Note [Implicit generator] (compiler/ir/generator_state.h).
    if (entry.contains("results")) where.fail("results", "dropout has one result, named by 'name'");
    try {
      ir::add_generator_dropout(program, operands[0], attrs.has("p") ? attrs.get_float("p") : 0.1,
                                name);
    } catch (const ModelFormatError&) {
      throw;
    } catch (const Error& error) {
      where.fail(entry.contains("attrs") ? "inputs/attrs" : "inputs", error.what());
    }
    return;
  }
  std::vector<ir::TensorType> types;
  try {
    context.attrs = registry.normalize_attrs(context, attrs);
    types = registry.infer_types(context);
  } catch (const ModelFormatError&) {
    throw;
  } catch (const Error& error) {
    where.fail(entry.contains("attrs") ? "inputs/attrs" : "inputs", error.what());
  }

  std::vector<std::string> result_names;
  if (auto found = entry.find("results"); found != entry.end()) {
    if (!found->is_array() || found->size() != types.size()) {
      where.fail("results", str_cat("must list ", types.size(), " result name(s)"));
    }
    for (size_t i = 0; i < found->size(); ++i) {
      if (!(*found)[i].is_string()) where.fail(str_cat("results[", i, "]"), "must be a string");
      result_names.push_back((*found)[i].get<std::string>());
    }
  } else {
    for (size_t i = 0; i < types.size(); ++i) {
      result_names.push_back(types.size() == 1 ? name : str_cat(name, ".", i));
    }
  }
  for (const std::string& result : result_names) {
    if (program.has_name(result)) {
      where.fail("name", str_cat("result '", result, "' is already defined; names must be unique"));
    }
  }
  program.add_node(name, op, operands, context.attrs, result_names, types);
}

ir::Program Loader::load(const json& model) {
  Location top{"?", "the model"};
  if (!model.is_object())
    top.fail("(root)", str_cat("must be an object, found ", type_name(model)));
  if (model.contains("name") && model["name"].is_string())
    model_name_ = model["name"].get<std::string>();
  top.model = model_name_;
  check_fields(model,
               {"name", "description", "dims", "inputs", "params", "buffers", "nodes", "outputs"},
               top);
  std::string name = require_string(model, "name", top);

  if (auto found = model.find("dims"); found != model.end()) {
    if (!found->is_object())
      top.fail("dims", str_cat("must be an object, found ", type_name(*found)));
    for (const auto& [dim, value] : found->items()) {
      if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
        top.fail("dims." + dim, str_cat("must be a positive integer, found ", value.dump()));
      }
      dims_[dim] = value.get<int64_t>();
    }
  }
  for (const auto& [dim, value] : bindings_) {
    if (dims_.count(dim) == 0) {
      top.fail("dims",
               str_cat("has no dimension '", dim, "' to bind; declared: ", json(dims_).dump()));
    }
    if (value <= 0)
      top.fail("dims." + dim, str_cat("is bound to ", value, "; sizes must be positive"));
    dims_[dim] = value;
  }

  ir::Program program(name, device_);
  program.set_dims(dims_);
  declare_inputs(model, "inputs", ir::ValueKind::kInput, program);
  declare_inputs(model, "params", ir::ValueKind::kParam, program);
  declare_inputs(model, "buffers", ir::ValueKind::kBuffer, program);

  const json& nodes = require_field(model, "nodes", top);
  if (!nodes.is_array()) top.fail("nodes", str_cat("must be an array, found ", type_name(nodes)));
  for (const json& entry : nodes) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) continue;
    std::string node_name = entry["name"].get<std::string>();
    later_definitions_.emplace(node_name, node_name);
    if (auto results = entry.find("results"); results != entry.end() && results->is_array()) {
      for (const json& result : *results) {
        if (result.is_string()) later_definitions_.emplace(result.get<std::string>(), node_name);
      }
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) add_node(nodes[i], i, program);

  const json& outputs = require_field(model, "outputs", top);
  if (!outputs.is_array())
    top.fail("outputs", str_cat("must be an array of value names, found ", type_name(outputs)));
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string field = str_cat("outputs[", i, "]");
    if (!outputs[i].is_string()) top.fail(field, "must be a value name");
    std::optional<ir::ValueId> id = program.find_value(outputs[i].get<std::string>());
    if (!id)
      top.fail(field, str_cat("names '", outputs[i].get<std::string>(),
                              "', which the model does not define"));
    program.add_output(*id);
  }
  try {
    program.verify();
  } catch (const ModelFormatError&) {
    throw;
  } catch (const Error& error) {
    top.fail("nodes", error.what());
  }
  return program;
}

json shape_json(const ir::Shape& shape) { return json(shape); }

json attr_json(const ir::AttrValue& value) {
  return std::visit([](const auto& v) { return json(v); }, value);
}

json init_json(const ir::Initializer& init) {
  json result = {{"kind", ir::init_kind_name(init.kind)}};
  switch (init.kind) {
    case ir::InitKind::kConstant:
      result["value"] = init.value;
      break;
    case ir::InitKind::kNormal:
      result["mean"] = init.mean;
      result["std"] = init.std;
      result["seed"] = init.seed;
      break;
    case ir::InitKind::kUniform:
      result["low"] = init.low;
      result["high"] = init.high;
      result["seed"] = init.seed;
      break;
    default:
      break;
  }
  return result;
}

}  // namespace

int64_t max_model_bytes() {
  const char* text = std::getenv("GROVE_MODEL_MAX_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultMaxModelBytes;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  GROVE_CHECK_AS(ModelFormatError, end != text && *end == '\0' && value > 0,
                 "GROVE_MODEL_MAX_BYTES='", text, "' is not a positive number of bytes");
  return value;
}

json parse_model_json(const std::string& json_text) {
  // Note [Model JSON bounded at parse time].
  try {
    return json::parse(json_text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) {
        throw ModelFormatError(str_cat("model JSON nests deeper than ", kMaxJsonDepth,
                                       " levels; grove models are at most a few levels deep"));
      }
      return true;
    });
  } catch (const json::exception& error) {
    throw ModelFormatError(str_cat("model JSON does not parse: ", error.what()));
  }
}

std::string read_model_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::file_status status = fs::status(path, error);
  GROVE_CHECK_AS(ModelFormatError, fs::exists(status), "cannot open model file '", path,
                 "': no such file");
  GROVE_CHECK_AS(ModelFormatError, !fs::is_directory(status), "model file '", path,
                 "' is a directory; give the path of a grove model JSON file");
  GROVE_CHECK_AS(ModelFormatError, fs::is_regular_file(status), "model file '", path,
                 "' is not a regular file (a device, pipe or socket); give the path of a grove "
                 "model JSON file");
  const uintmax_t size = fs::file_size(path, error);
  GROVE_CHECK_AS(ModelFormatError, !error, "cannot read the size of model file '", path,
                 "': ", error.message());
  const int64_t limit = max_model_bytes();
  GROVE_CHECK_AS(ModelFormatError, size <= static_cast<uintmax_t>(limit), "model file '", path,
                 "' is ", size, " bytes, more than the ", limit,
                 "-byte limit for model JSON; raise GROVE_MODEL_MAX_BYTES if it is really a model");
  std::ifstream file(path, std::ios::binary);
  GROVE_CHECK_AS(ModelFormatError, file.good(), "cannot open model file '", path, "'");
  std::string text(static_cast<size_t>(size), '\0');
  file.read(text.data(), static_cast<std::streamsize>(size));
  GROVE_CHECK_AS(ModelFormatError, file.gcount() == static_cast<std::streamsize>(size),
                 "model file '", path, "' changed while it was read; read ", file.gcount(), " of ",
                 size, " bytes");
  return text;
}

ir::Program load_model(const std::string& json_text, const DimBindings& dims, ir::Device device) {
  return Loader(dims, device).load(parse_model_json(json_text));
}

ir::Program load_model_file(const std::string& path, const DimBindings& dims, ir::Device device) {
  return load_model(read_model_file(path), dims, device);
}

std::string export_model(const ir::Program& program) {
  json model;
  model["name"] = program.name();
  if (!program.dims().empty()) model["dims"] = program.dims();
  for (auto [kind, section] :
       {std::pair{ir::ValueKind::kInput, "inputs"}, std::pair{ir::ValueKind::kParam, "params"},
        std::pair{ir::ValueKind::kBuffer, "buffers"}}) {
    json entries = json::array();
    for (ir::ValueId id : program.inputs_of_kind(kind)) {
      const ir::Value& value = program.value(id);
      json entry = {{"name", value.name},
                    {"shape", shape_json(value.type.shape)},
                    {"dtype", runtime::dtype_name(value.type.dtype)}};
      if (value.initializer) entry["init"] = init_json(*value.initializer);
      entries.push_back(entry);
    }
    if (!entries.empty() || kind == ir::ValueKind::kInput) model[section] = entries;
  }
  json nodes = json::array();
  for (const ir::Node& node : program.nodes()) {
    json entry = {{"name", node.name}, {"op", node.op}};
    json inputs = json::array();
    for (ir::ValueId operand : node.operands) inputs.push_back(program.value(operand).name);
    entry["inputs"] = inputs;
    if (!node.attrs.empty()) {
      json attrs = json::object();
      for (const auto& [name, value] : node.attrs.entries()) attrs[name] = attr_json(value);
      entry["attrs"] = attrs;
    }
    bool default_names = true;
    for (size_t i = 0; i < node.results.size(); ++i) {
      std::string expected = node.results.size() == 1 ? node.name : str_cat(node.name, ".", i);
      default_names = default_names && program.value(node.results[i]).name == expected;
    }
    if (!default_names) {
      json results = json::array();
      for (ir::ValueId result : node.results) results.push_back(program.value(result).name);
      entry["results"] = results;
    }
    nodes.push_back(entry);
  }
  model["nodes"] = nodes;
  json outputs = json::array();
  for (ir::ValueId output : program.outputs()) outputs.push_back(program.value(output).name);
  model["outputs"] = outputs;
  return model.dump(2) + "\n";
}

}  // namespace grove::compiler::model_format
