// Attributes are the static, per-node parameters of an op (a reduction's dims,
// a slice's bounds, layer_norm's eps): a small ordered map from name to an
// int, a float, a list of ints or a string. Ops declare the attributes they
// accept (OpDef::attrs); OpRegistry::normalize_attrs fills defaults and
// rejects unknown or mistyped ones.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace grove::compiler::ir {

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

enum class AttrKind : uint8_t { kInt, kFloat, kInts, kString };

const char* attr_kind_name(AttrKind kind);  // "int", "float", "int list", "string"
AttrKind attr_kind_of(const AttrValue& value);
std::string attr_value_str(const AttrValue& value);  // "3", "1e-05", "[0, 1]", "\"hi\""

class Attributes {
 public:
  Attributes() = default;
  Attributes(std::initializer_list<std::pair<const std::string, AttrValue>> entries)
      : entries_(entries) {}

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  void set(const std::string& name, AttrValue value) { entries_[name] = std::move(value); }

  // Typed reads. Each throws grove::Error naming the attribute when it is
  // missing or of another kind; a float read accepts an int.
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;

  const std::map<std::string, AttrValue>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  friend bool operator==(const Attributes&, const Attributes&) = default;

  std::string str() const;  // "{dim=1, keepdim=0}"

 private:
  std::map<std::string, AttrValue> entries_;
};

}  // namespace grove::compiler::ir
