#include "runtime/small_shape.h"

#include <stdexcept>
#include <string>

namespace grove::runtime {

int64_t& SmallShape::at(size_t i) {
  if (i >= size_) {
    throw std::out_of_range("SmallShape::at(" + std::to_string(i) + ") of a shape of rank " +
                            std::to_string(size_));
  }
  return data()[i];
}

const int64_t& SmallShape::at(size_t i) const { return const_cast<SmallShape*>(this)->at(i); }

SmallShape::iterator SmallShape::insert(const_iterator position, size_t count, int64_t value) {
  auto index = static_cast<size_t>(position - begin());
  open_gap(index, count);
  std::fill(data() + index, data() + index + count, value);
  return data() + index;
}

SmallShape::iterator SmallShape::erase(const_iterator first, const_iterator last) {
  auto index = static_cast<size_t>(first - begin());
  auto count = static_cast<size_t>(last - first);
  int64_t* base = data();
  std::copy(base + index + count, base + size_, base + index);
  size_ -= static_cast<uint32_t>(count);
  return base + index;
}

void SmallShape::grow(size_t minimum) {
  size_t capacity = std::max<size_t>(minimum, size_t{2} * capacity_);
  auto* heap = new int64_t[capacity];
  std::copy(begin(), end(), heap);
  delete[] heap_;
  heap_ = heap;
  capacity_ = static_cast<uint32_t>(capacity);
}

void SmallShape::open_gap(size_t index, size_t count) {
  reserve(static_cast<size_t>(size_) + count);
  int64_t* base = data();
  std::copy_backward(base + index, base + size_, base + size_ + count);
  size_ += static_cast<uint32_t>(count);
}

}  // namespace grove::runtime
