// The reference reader of serving/kserve_request_reader.h (Note [Reading
// request data]): nlohmann's SAX parser over the whole text, into the tree
// and the inputs' data values.
#include <string>

#include "serving/kserve_protocol.h"
#include "serving/kserve_request_reader.h"

namespace grove::serving {
namespace {

using nlohmann::json;

// nlohmann's SAX events into a tree, except the elements of root.inputs[i].data
// arrays, which go to RequestDocument::data (Note [Reading request data]).
class RequestSax {
 public:
  RequestSax(RequestDocument& document, size_t max_values)
      : document_(document), max_values_(max_values) {}

  bool null() { return value(nullptr); }
  bool boolean(bool v) {
    if (capturing()) return capture(DataValue::Kind::kBool, [&](DataValue& d) { d.boolean = v; });
    return value(v);
  }
  bool number_integer(json::number_integer_t v) {
    if (capturing()) {
      return capture(DataValue::Kind::kInteger, [&](DataValue& d) { d.integer = v; });
    }
    return value(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (capturing()) {
      return capture(DataValue::Kind::kUnsigned, [&](DataValue& d) { d.unsigned_integer = v; });
    }
    return value(v);
  }
  bool number_float(json::number_float_t v, const json::string_t&) {
    if (capturing()) return capture(DataValue::Kind::kFloat, [&](DataValue& d) { d.floating = v; });
    return value(v);
  }
  bool string(json::string_t& v) { return value(std::move(v)); }
  bool binary(json::binary_t& v) { return value(json::binary(std::move(v))); }

  bool start_object(size_t) {
    check_depth();
    ++open_;
    if (capturing()) {
      // An object among the data: built as a tree, kept as an odd element
      // (counted against kMaxRequestNodes, never dropped).
      count_node();
      ++capture_->count;
      ++kept_values_;
      capture_->others.emplace_back(json::object());
      push_other();
      stack_.push_back(&capture_->others.back());
      return true;
    }
    const bool input = stack_.size() == 2 && stack_.back() == inputs_;
    json* object = put(json::object());
    if (input) {
      input_index_ = inputs_->size() - 1;
      if (document_.data.size() <= input_index_) document_.data.resize(input_index_ + 1);
      input_ = object;
    }
    stack_.push_back(object);
    return true;
  }

  bool key(json::string_t& name) {
    check_depth();
    json& object = *stack_.back();
    key_is_inputs_ = stack_.size() == 1 && name == "inputs";
    key_is_data_ = stack_.size() == 3 && stack_.back() == input_ && name == "data";
    slot_ = &object[name];  // a duplicate key's later value replaces the earlier one
    return true;
  }

  bool end_object() {
    --open_;
    stack_.pop_back();
    return true;
  }

  bool start_array(size_t) {
    check_depth();
    ++open_;
    if (capturing()) {
      ++capture_arrays_;  // nested data: flattened
      return true;
    }
    if (key_is_data_ && stack_.size() == 3 && stack_.back() == input_) {
      key_is_data_ = false;
      put(json::array());  // the tree keeps an empty "data" array
      InputData& data = document_.data[input_index_];
      data = InputData();
      data.read = true;
      capture_ = &data;
      capture_base_ = stack_.size();
      capture_arrays_ = 1;
      return true;
    }
    const bool inputs = key_is_inputs_ && stack_.size() == 1;
    json* array = put(json::array());
    if (inputs) {
      key_is_inputs_ = false;
      inputs_ = array;
      input_ = nullptr;
      document_.data.clear();  // a later "inputs" replaces an earlier one
    }
    stack_.push_back(array);
    return true;
  }

  bool end_array() {
    --open_;
    if (capture_ != nullptr && stack_.size() == capture_base_) {
      if (--capture_arrays_ == 0) capture_ = nullptr;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  template <typename Exception>
  bool parse_error(size_t, const std::string&, const Exception& error) {
    throw ProtocolError(str_cat("request body is not valid JSON: ", error.what()));
  }

 private:
  // Inside a data array and not inside an object among its elements.
  bool capturing() const { return capture_ != nullptr && stack_.size() == capture_base_; }

  // Note [Request memory bounded by the model]: past max_values, counted only.
  bool keep_value() {
    ++capture_->count;
    if (kept_values_ >= max_values_) return false;
    ++kept_values_;
    return true;
  }

  void count_node() {
    if (++nodes_ > kMaxRequestNodes) {
      throw ProtocolError(str_cat("request body holds more than ", kMaxRequestNodes,
                                  " JSON values besides the inputs' data"));
    }
  }

  template <typename Fill>
  bool capture(DataValue::Kind kind, Fill fill) {
    check_depth();
    if (!keep_value()) return true;
    DataValue& value = capture_->values.emplace_back();
    value.kind = kind;
    fill(value);
    return true;
  }

  void push_other() {
    DataValue& value = capture_->values.emplace_back();
    value.kind = DataValue::Kind::kOther;
    value.other = capture_->others.size() - 1;
  }

  template <typename Value>
  bool value(Value&& v) {
    check_depth();
    if (capturing()) {
      if (!keep_value()) return true;
      count_node();
      capture_->others.emplace_back(std::forward<Value>(v));
      push_other();
      return true;
    }
    put(std::forward<Value>(v));
    return true;
  }

  // Places a value in the open container (or as the root); returns it.
  template <typename Value>
  json* put(Value&& v) {
    count_node();
    if (stack_.empty()) {
      document_.json = json(std::forward<Value>(v));
      return &document_.json;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.emplace_back(std::forward<Value>(v));
      return &parent.back();
    }
    *slot_ = json(std::forward<Value>(v));
    return slot_;
  }

  // As nlohmann::json::parse's callback saw depth: the containers open
  // around the event.
  void check_depth() const {
    if (open_ > kMaxRequestDepth) {
      throw ProtocolError(str_cat("request body nests deeper than ", kMaxRequestDepth,
                                  " levels; give data flat or nested as its shape"));
    }
  }

  RequestDocument& document_;
  const size_t max_values_;
  size_t kept_values_ = 0;    // data values kept, over all inputs
  size_t nodes_ = 0;          // JSON values besides the data numbers
  std::vector<json*> stack_;  // the open containers of the tree
  json* slot_ = nullptr;      // the value of the object key just read
  int open_ = 0;              // open containers, data arrays included
  bool key_is_inputs_ = false;
  bool key_is_data_ = false;
  json* inputs_ = nullptr;  // root.inputs, once an array
  json* input_ = nullptr;   // the object of root.inputs being read
  size_t input_index_ = 0;
  InputData* capture_ = nullptr;  // the data array being read, if any
  size_t capture_base_ = 0;       // stack_.size() inside it
  int capture_arrays_ = 0;        // its arrays open
};

}  // namespace

json InputData::value_json(const DataValue& value) const {
  switch (value.kind) {
    case DataValue::Kind::kInteger:
      return json(value.integer);
    case DataValue::Kind::kUnsigned:
      return json(value.unsigned_integer);
    case DataValue::Kind::kFloat:
      return json(value.floating);
    case DataValue::Kind::kBool:
      return json(value.boolean);
    case DataValue::Kind::kOther:
      break;
  }
  return others.at(value.other);
}

RequestDocument read_request_document_reference(std::string_view text, size_t max_values) {
  RequestDocument document;
  RequestSax sax(document, max_values);
  json::sax_parse(text.begin(), text.end(), &sax);
  return document;
}

}  // namespace grove::serving
