#include "compiler/ir/attributes.h"

#include <sstream>

#include "runtime/error.h"

namespace grove::compiler::ir {

const char* attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt:
      return "int";
    case AttrKind::kFloat:
      return "float";
    case AttrKind::kInts:
      return "int list";
    case AttrKind::kString:
      return "string";
  }
  return "?";
}

AttrKind attr_kind_of(const AttrValue& value) { return static_cast<AttrKind>(value.index()); }

std::string attr_value_str(const AttrValue& value) {
  std::ostringstream stream;
  if (const auto* integer = std::get_if<int64_t>(&value)) {
    stream << *integer;
  } else if (const auto* real = std::get_if<double>(&value)) {
    stream.precision(17);
    stream << *real;
  } else if (const auto* list = std::get_if<std::vector<int64_t>>(&value)) {
    stream << "[";
    for (size_t i = 0; i < list->size(); ++i) stream << (i ? ", " : "") << (*list)[i];
    stream << "]";
  } else {
    stream << '"' << std::get<std::string>(value) << '"';
  }
  return stream.str();
}

namespace {

template <typename T>
const T& get_as(const std::map<std::string, AttrValue>& entries, const std::string& name,
                AttrKind kind) {
  auto found = entries.find(name);
  GROVE_CHECK(found != entries.end(), "attribute '", name, "' is missing: expected an ",
              attr_kind_name(kind), "; set it on the node");
  const T* value = std::get_if<T>(&found->second);
  GROVE_CHECK(value != nullptr, "attribute '", name, "' has the wrong kind: expected ",
              attr_kind_name(kind), ", found ", attr_kind_name(attr_kind_of(found->second)), " ",
              attr_value_str(found->second));
  return *value;
}

}  // namespace

int64_t Attributes::get_int(const std::string& name) const {
  return get_as<int64_t>(entries_, name, AttrKind::kInt);
}

double Attributes::get_float(const std::string& name) const {
  auto found = entries_.find(name);
  if (found != entries_.end()) {
    if (const auto* integer = std::get_if<int64_t>(&found->second)) {
      return static_cast<double>(*integer);
    }
  }
  return get_as<double>(entries_, name, AttrKind::kFloat);
}

const std::vector<int64_t>& Attributes::get_ints(const std::string& name) const {
  return get_as<std::vector<int64_t>>(entries_, name, AttrKind::kInts);
}

const std::string& Attributes::get_string(const std::string& name) const {
  return get_as<std::string>(entries_, name, AttrKind::kString);
}

std::string Attributes::str() const {
  std::string text = "{";
  bool first = true;
  for (const auto& [name, value] : entries_) {
    if (!first) text += ", ";
    first = false;
    text += name + "=" + attr_value_str(value);
  }
  return text + "}";
}

}  // namespace grove::compiler::ir
