// SmallShape is a tensor's shape or strides: a vector of int64_t that keeps up
// to kInlineCapacity extents inside the object and goes to the heap only
// beyond that. It offers the part of std::vector's interface the code base
// uses, converts to and from std::vector<int64_t>, and compares like one.
//
// Note [Shapes without allocation]: every Tensor holds two of these (shape
// and strides), and the per-call host path of a compiled model copies
// Tensors many times (argument lists, segment environments, replay outputs).
// With std::vector each copy of a tensor cost two heap allocations; with the
// inline storage a copy of a tensor of rank <= kInlineCapacity allocates
// nothing (tests/runtime/small_shape_test.cc checks both).
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <vector>

namespace grove::runtime {

class SmallShape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  static constexpr size_t kInlineCapacity = 6;

  SmallShape() noexcept = default;
  explicit SmallShape(size_t count, int64_t value = 0) { assign(count, value); }
  SmallShape(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  template <std::input_iterator Iterator>
  SmallShape(Iterator first, Iterator last) {
    assign(first, last);
  }
  // Implicit on purpose: shapes arrive as std::vector from parsers and helpers.
  SmallShape(const std::vector<int64_t>& values) {  // NOLINT(google-explicit-constructor)
    assign(values.begin(), values.end());
  }
  SmallShape(const SmallShape& other) { assign(other.begin(), other.end()); }
  SmallShape(SmallShape&& other) noexcept { take(other); }
  SmallShape& operator=(const SmallShape& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SmallShape& operator=(SmallShape&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  SmallShape& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~SmallShape() { release(); }

  // Implicit, like the std::vector it replaces (allocates; not for hot paths).
  operator std::vector<int64_t>() const {  // NOLINT(google-explicit-constructor)
    return std::vector<int64_t>(begin(), end());
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  bool is_inline() const { return heap_ == nullptr; }

  int64_t* data() { return heap_ != nullptr ? heap_ : inline_; }
  const int64_t* data() const { return heap_ != nullptr ? heap_ : inline_; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  // Throws std::out_of_range, as std::vector::at does.
  int64_t& at(size_t i);
  const int64_t& at(size_t i) const;
  int64_t& front() { return data()[0]; }
  const int64_t& front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }

  void reserve(size_t count) {
    if (count > capacity_) grow(count);
  }
  void clear() { size_ = 0; }
  void resize(size_t count, int64_t value = 0) {
    reserve(count);
    if (count > size_) std::fill(data() + size_, data() + count, value);
    size_ = static_cast<uint32_t>(count);
  }
  void push_back(int64_t value) {
    if (size_ == capacity_) grow(capacity_ * 2);
    data()[size_++] = value;
  }
  int64_t& emplace_back(int64_t value) {
    push_back(value);
    return back();
  }
  void pop_back() { --size_; }

  void assign(size_t count, int64_t value) {
    size_ = 0;
    resize(count, value);
  }
  template <std::input_iterator Iterator>
  void assign(Iterator first, Iterator last) {
    size_ = 0;
    if constexpr (std::forward_iterator<Iterator>) {
      reserve(static_cast<size_t>(std::distance(first, last)));
    }
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }

  iterator insert(const_iterator position, int64_t value) {
    return insert(position, size_t{1}, value);
  }
  iterator insert(const_iterator position, size_t count, int64_t value);
  template <std::forward_iterator Iterator>
  iterator insert(const_iterator position, Iterator first, Iterator last) {
    auto index = static_cast<size_t>(position - begin());
    auto count = static_cast<size_t>(std::distance(first, last));
    open_gap(index, count);
    std::copy(first, last, data() + index);
    return data() + index;
  }
  iterator insert(const_iterator position, std::initializer_list<int64_t> values) {
    return insert(position, values.begin(), values.end());
  }
  iterator erase(const_iterator position) { return erase(position, position + 1); }
  iterator erase(const_iterator first, const_iterator last);

  void swap(SmallShape& other) noexcept {
    SmallShape held(std::move(other));
    other = std::move(*this);
    *this = std::move(held);
  }

  friend bool operator==(const SmallShape& a, const SmallShape& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend std::strong_ordering operator<=>(const SmallShape& a, const SmallShape& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void grow(size_t minimum);  // to at least `minimum` (and at least double)
  void open_gap(size_t index, size_t count);
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    capacity_ = kInlineCapacity;
  }
  // Moves `other`'s elements here (this holds none) and leaves it empty.
  void take(SmallShape& other) noexcept {
    if (other.heap_ != nullptr) {
      heap_ = other.heap_;
      capacity_ = other.capacity_;
      other.heap_ = nullptr;
      other.capacity_ = kInlineCapacity;
    } else {
      std::copy(other.inline_, other.inline_ + other.size_, inline_);
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  int64_t* heap_ = nullptr;  // null while the elements fit inline_
  uint32_t size_ = 0;
  uint32_t capacity_ = kInlineCapacity;
  int64_t inline_[kInlineCapacity] = {};
};

inline void swap(SmallShape& a, SmallShape& b) noexcept { a.swap(b); }

// nlohmann::json (found by argument-dependent lookup; templated so that the
// runtime does not depend on the JSON library): a shape is a JSON array.
template <typename Json>
void to_json(Json& json, const SmallShape& shape) {
  json = shape.vec();
}
template <typename Json>
void from_json(const Json& json, SmallShape& shape) {
  shape = json.template get<std::vector<int64_t>>();
}

}  // namespace grove::runtime
