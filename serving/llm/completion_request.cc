#include "serving/llm/completion_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "serving/kserve_protocol.h"

namespace grove::serving::llm {

std::string brief_json(const nlohmann::json& value) {
  std::string text = json_text(value);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

namespace {

// What nlohmann's parse error says was wrong, without its "last read: ..."
// (the client's bytes): "syntax error while parsing value - invalid string:
// ill-formed UTF-8 byte".
std::string parse_error_reason(const nlohmann::json::parse_error& error) {
  std::string text = error.what();
  const size_t column = text.find("column ");
  const size_t start = column == std::string::npos ? std::string::npos : text.find(": ", column);
  if (start == std::string::npos) return "a syntax error";
  std::string reason = text.substr(start + 2);
  if (const size_t last_read = reason.find("; last read"); last_read != std::string::npos) {
    reason.resize(last_read);
  }
  return reason;
}

}  // namespace

size_t most_body_values(int64_t max_prompt_tokens) {
  // Besides the prompt: the fields, parameters, up to 16 stop strings.
  constexpr size_t kOtherValues = 256;
  return static_cast<size_t>(std::max<int64_t>(max_prompt_tokens, 0)) + kOtherValues;
}

// Note [Bounded request bodies].
nlohmann::json parse_json_object(const std::string& body, size_t max_values) {
  size_t values = 0;
  auto bound = [&values, max_values](int depth, nlohmann::json::parse_event_t event,
                                     nlohmann::json&) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_end || event == Event::array_end) return true;
    GROVE_CHECK_AS(
        CompletionError,
        !(event == Event::object_start || event == Event::array_start) || depth < kMaxRequestDepth,
        "the request body nests deeper than ", kMaxRequestDepth, " levels");
    GROVE_CHECK_AS(CompletionError, ++values <= max_values, "the request body holds more than ",
                   max_values, " JSON values; a prompt holds at most ",
                   max_values - most_body_values(0), " token ids");
    return true;
  };
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(body, bound);
  } catch (const nlohmann::json::parse_error& error) {
    throw CompletionError(str_cat("the request body is not JSON: ", parse_error_reason(error),
                                  " (at byte ", error.byte, ")"));
  }
  GROVE_CHECK_AS(CompletionError, parsed.is_object(),
                 "the request body must be a JSON object, not ", brief_json(parsed));
  return parsed;
}

int64_t read_integer(const nlohmann::json& value, const std::string& name) {
  if (value.is_number_integer()) {
    GROVE_CHECK_AS(
        CompletionError,
        value.is_number_unsigned()
            ? value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
            : true,
        name, " ", brief_json(value), " is too large");
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double number = value.get<double>();
    GROVE_CHECK_AS(
        CompletionError,
        std::isfinite(number) && number == std::floor(number) && std::fabs(number) < 9e18, name,
        " must be an integer, found ", brief_json(value));
    return static_cast<int64_t>(number);
  }
  throw CompletionError(str_cat(name, " must be an integer, found ", brief_json(value)));
}

double read_number(const nlohmann::json& value, const std::string& name) {
  GROVE_CHECK_AS(CompletionError, value.is_number(), name, " must be a number, found ",
                 brief_json(value));
  return value.get<double>();
}

bool read_bool(const nlohmann::json& value, const std::string& name) {
  GROVE_CHECK_AS(CompletionError, value.is_boolean(), name, " must be true or false, found ",
                 brief_json(value));
  return value.get<bool>();
}

const std::string& read_string(const nlohmann::json& value, const std::string& name) {
  GROVE_CHECK_AS(CompletionError, value.is_string(), name, " must be a string, found ",
                 brief_json(value));
  return value.get_ref<const std::string&>();
}

std::vector<std::string> read_stop(const nlohmann::json& value, const std::string& name) {
  constexpr size_t kMostStops = 16;
  if (value.is_string()) {
    std::string stop = value.get<std::string>();
    if (stop.empty()) return {};
    return {stop};
  }
  GROVE_CHECK_AS(CompletionError, value.is_array(), name,
                 " must be a string or a list of strings, found ", brief_json(value));
  GROVE_CHECK_AS(CompletionError, value.size() <= kMostStops, name, " lists ", value.size(),
                 " strings; at most ", kMostStops, " are taken");
  std::vector<std::string> stops;
  for (size_t i = 0; i < value.size(); ++i) {
    std::string stop = read_string(value[i], str_cat(name, "[", i, "]"));
    if (!stop.empty()) stops.push_back(std::move(stop));
  }
  return stops;
}

std::string read_request_id(const nlohmann::json& value) {
  const std::string& id = read_string(value, "id");
  GROVE_CHECK_AS(CompletionError, id.size() <= kMostIdBytes, "id is ", id.size(),
                 " bytes long; at most ", kMostIdBytes, " are taken");
  return id;
}

std::vector<int64_t> read_token_ids(const nlohmann::json& value, const std::string& name) {
  GROVE_CHECK_AS(CompletionError, value.is_array(), name, " must be a list of token ids, found ",
                 brief_json(value));
  std::vector<int64_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    GROVE_CHECK_AS(CompletionError, value[i].is_number_integer(), name, "[", i,
                   "] must be an integer token id, found ", brief_json(value[i]));
    GROVE_CHECK_AS(CompletionError,
                   !value[i].is_number_unsigned() || value[i].get<uint64_t>() < (uint64_t{1} << 62),
                   name, "[", i, "] ", brief_json(value[i]), " is not a token id");
    const int64_t id = value[i].get<int64_t>();
    GROVE_CHECK_AS(CompletionError, id >= 0, name, "[", i, "] ", id, " is not a token id");
    ids.push_back(id);
  }
  return ids;
}

}  // namespace grove::serving::llm
