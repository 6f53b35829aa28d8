#include "compiler/lowering/layout.h"

#include "runtime/error.h"

namespace grove::compiler::lowering {

Layout Layout::contiguous(const Shape& shape) {
  return Layout{shape, runtime::contiguous_strides(shape), 0};
}

bool Layout::is_contiguous() const {
  Shape expected = runtime::contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && strides[d] != expected[d]) return false;
  }
  return true;
}

std::optional<Shape> view_strides(const Shape& shape, const Shape& strides,
                                  const Shape& new_shape) {
  if (runtime::shape_numel(shape) == 0 || shape.empty()) {
    return runtime::contiguous_strides(new_shape);
  }
  // Walk the old dims from the innermost, in chunks whose elements are evenly
  // strided; each chunk must be covered exactly by a run of new dims.
  Shape result(new_shape.size(), 0);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_stride = strides.back();
  int64_t chunk_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    chunk_numel *= shape[static_cast<size_t>(d)];
    bool chunk_ends = d == 0 || (shape[static_cast<size_t>(d - 1)] != 1 &&
                                 strides[static_cast<size_t>(d - 1)] != chunk_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 &&
           (view_numel < chunk_numel || new_shape[static_cast<size_t>(view_d)] == 1)) {
      result[static_cast<size_t>(view_d)] = view_numel * chunk_stride;
      view_numel *= new_shape[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != chunk_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[static_cast<size_t>(d - 1)];
      chunk_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return result;
}

AccessMap AccessMap::identity(size_t rank) {
  AccessMap map;
  for (size_t d = 0; d < rank; ++d) {
    map.dim.push_back(static_cast<int>(d));
    map.inner.push_back(1);
  }
  return map;
}

bool AccessMap::has_merged_dims() const {
  for (size_t j = 0; j < dim.size(); ++j) {
    for (size_t k = j + 1; k < dim.size(); ++k) {
      if (dim[j] >= 0 && dim[j] == dim[k]) return true;
    }
  }
  return false;
}

AccessMap broadcast_map(const Shape& from, const Shape& to) {
  GROVE_CHECK_AS(ShapeError, from.size() <= to.size(), "broadcast_map: ", runtime::shape_str(from),
                 " does not broadcast to ", runtime::shape_str(to));
  AccessMap map;
  size_t lead = to.size() - from.size();
  for (size_t j = 0; j < from.size(); ++j) {
    bool broadcast = from[j] == 1 && to[lead + j] != 1;
    map.dim.push_back(broadcast || from[j] == 1 ? -1 : static_cast<int>(lead + j));
    map.inner.push_back(1);
  }
  return map;
}

AccessMap compose(const AccessMap& outer, const AccessMap& inner) {
  AccessMap map;
  for (size_t j = 0; j < inner.dim.size(); ++j) {
    int through = inner.dim[j];
    if (through < 0) {
      map.dim.push_back(-1);
      map.inner.push_back(1);
    } else {
      map.dim.push_back(outer.dim[static_cast<size_t>(through)]);
      map.inner.push_back(outer.inner[static_cast<size_t>(through)] * inner.inner[j]);
    }
  }
  return map;
}

std::optional<Shape> iteration_strides(const Shape& shape, const Shape& strides,
                                       const AccessMap& map, size_t iteration_rank) {
  Shape result(iteration_rank, 0);
  std::vector<bool> set(iteration_rank, false);
  for (size_t j = 0; j < shape.size(); ++j) {
    int d = map.dim[j];
    if (d < 0 || shape[j] == 1) continue;
    if (strides[j] % map.inner[j] != 0) return std::nullopt;
    int64_t stride = strides[j] / map.inner[j];
    auto i = static_cast<size_t>(d);
    if (set[i] && result[i] != stride) return std::nullopt;
    result[i] = stride;
    set[i] = true;
  }
  return result;
}

}  // namespace grove::compiler::lowering
