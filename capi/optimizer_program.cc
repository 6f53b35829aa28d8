// grove_optimizer_program: the optimizer step programs the Trainer builds
// (training/optimizer.h), handed to other languages as grove JSON so
// that a binding compiles them through grove_compile instead of writing its own.
#include <nlohmann/json.hpp>
#include <string>

#include "capi/api_support.h"
#include "capi/grove.h"
#include "compiler/ir/program.h"
#include "compiler/model_format/model_json.h"
#include "training/optimizer.h"

namespace {

using grove::capi::require;
using grove::capi::run_api;
namespace training = grove::training;
namespace model_format = grove::compiler::model_format;

training::GradientSource parse_gradient_source(const nlohmann::json& request) {
  auto found = request.find("gradients");
  if (found == request.end()) return training::GradientSource::kBuffer;
  require(found->is_string() && (*found == "buffers" || *found == "inputs" || *found == "flat"),
          "field 'gradients' must be \"buffers\", \"inputs\" or \"flat\", found ", found->dump());
  if (*found == "inputs") return training::GradientSource::kInput;
  if (*found == "flat") return training::GradientSource::kFlatInput;
  return training::GradientSource::kBuffer;
}

// The optimizer's model: a program of the request's params, read by the model
// format's loader, which names any malformed param and field.
grove::compiler::ir::Program params_model(const nlohmann::json& request) {
  auto found = request.find("params");
  require(found != request.end() && found->is_array() && !found->empty(),
          "field 'params' must be a non-empty array of {\"name\", \"shape\", \"dtype\"}");
  nlohmann::json params = nlohmann::json::array();
  for (const nlohmann::json& param : *found) {
    require(param.is_object(), "each entry of 'params' must be an object, found ", param.dump());
    nlohmann::json entry = param;
    if (!entry.contains("init")) entry["init"] = {{"kind", "zeros"}};
    params.push_back(entry);
  }
  auto name = request.find("name");
  require(name == request.end() || name->is_string(), "field 'name' must be a string");
  nlohmann::json model = {{"name", name == request.end() ? "optimizer" : name->get<std::string>()},
                          {"inputs", nlohmann::json::array()},
                          {"params", params},
                          {"nodes", nlohmann::json::array()},
                          {"outputs", nlohmann::json::array()}};
  return model_format::load_model(model.dump());
}

}  // namespace

extern "C" grove_status grove_optimizer_program(const char* request_json, char** program_json) {
  return run_api("grove_optimizer_program", [&] {
    require(program_json != nullptr, "the output pointer `program_json` is null");
    *program_json = nullptr;
    require(request_json != nullptr, "the request text is null");
    nlohmann::json request = model_format::parse_model_json(request_json);
    require(request.is_object(), "the request must be a JSON object, found ", request.type_name());
    for (const auto& [key, value] : request.items()) {
      require(key == "optimizer" || key == "params" || key == "gradients" || key == "name",
              "unknown request field '", key, "' (fields: optimizer, params, gradients, name)");
    }
    auto optimizer = request.find("optimizer");
    require(optimizer != request.end() && optimizer->is_string(),
            "field 'optimizer' must be \"sgd_momentum\" or \"adamw\"");
    training::OptimizerKind kind;
    try {
      kind = training::parse_optimizer_kind(optimizer->get<std::string>());
    } catch (const grove::Error& error) {
      throw grove::capi::InvalidArgument(error.what());
    }
    grove::compiler::ir::Program model = params_model(request);
    training::OptimizerProgram step = training::build_optimizer_program(
        model, model.inputs_of_kind(grove::compiler::ir::ValueKind::kParam), kind,
        parse_gradient_source(request));
    *program_json = grove::capi::copy_string(model_format::export_model(step.program));
  });
}
