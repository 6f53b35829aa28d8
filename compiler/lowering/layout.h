// Static memory layouts and access maps: how the lowering knows, before any
// call, where every value's elements live relative to the allocation that
// holds them, and how a value's coordinates follow a kernel's iteration space.
//
// Note [Static layouts]: every value of a lowered program has a Layout fixed at
// lowering time: its shape, its element strides and its element offset from
// the start of its *root* (the value whose allocation or program input holds
// the storage). Kernel outputs are allocated contiguous; views derive their
// layout from their operand; in-place updates keep their operand's. Program
// inputs are contiguous (checked at call time). Because strides are static,
// kernels bake them in (Note [Kernel ABI]) and views launch nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace grove::compiler::lowering {

using runtime::Shape;

struct Layout {
  Shape shape;
  Shape strides;
  int64_t offset = 0;  // elements from the root's element 0

  static Layout contiguous(const Shape& shape);
  bool is_contiguous() const;
};

// Strides that view `shape`/`strides` as `new_shape` without moving data, or
// nullopt when the elements are not laid out compatibly (a copy is needed).
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape);

// How a value's coordinates derive from a kernel's iteration coordinates:
// value dim j has coordinate `inner[j] * ...` folded into iteration dim
// `dim[j]` (-1: the value dim has size 1 and coordinate 0). Several value dims
// map to one iteration dim when a reduction merges them; `inner[j]` is then
// the product of the sizes of the later merged dims (Note [Merged reduction dims]).
struct AccessMap {
  std::vector<int> dim;
  std::vector<int64_t> inner;

  static AccessMap identity(size_t rank);
  friend bool operator==(const AccessMap&, const AccessMap&) = default;
  friend auto operator<=>(const AccessMap&, const AccessMap&) = default;
  // Whether some value dim is merged with another into one iteration dim.
  bool has_merged_dims() const;
};

// The map of an operand of shape `from` broadcast (numpy rules) to `to`,
// relative to `to`'s own dims.
AccessMap broadcast_map(const Shape& from, const Shape& to);
// `inner` (relative to an outer value's dims) composed with `outer` (that
// value's map onto the iteration space).
AccessMap compose(const AccessMap& outer, const AccessMap& inner);

// Element strides over an iteration space of rank `iteration_rank` for a value
// with `shape`/`strides` accessed through `map`; nullopt when merged dims are
// not evenly strided (Note [Merged reduction dims]).
std::optional<Shape> iteration_strides(const Shape& shape, const Shape& strides,
                                       const AccessMap& map, size_t iteration_rank);

}  // namespace grove::compiler::lowering
