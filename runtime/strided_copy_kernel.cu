// Source of strided_copy_kernel_ptx.inc (regenerate_ptx.sh):
// gathers a strided tensor (expanded, transposed, sliced) into contiguous
// memory, see strided_copy_kernel.h. One thread per destination element,
// grid-strided; the element size is 1, 2, 4 or 8 bytes. Sizes and strides
// (in elements) come as eight scalar arguments each, innermost dimension
// last; unused leading dimensions have size 1.
extern "C" __global__ void grove_copy_strided(
    char* destination, const char* source, unsigned long long elements,
    unsigned long long element_bytes,
    long long size0,
    long long size1,
    long long size2,
    long long size3,
    long long size4,
    long long size5,
    long long size6,
    long long size7,
    long long stride0,
    long long stride1,
    long long stride2,
    long long stride3,
    long long stride4,
    long long stride5,
    long long stride6,
    long long stride7) {
  const long long sizes[8] = {size0, size1, size2, size3, size4, size5, size6, size7};
  const long long strides[8] = {stride0, stride1, stride2, stride3,
                                stride4, stride5, stride6, stride7};
  unsigned long long first = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  unsigned long long step = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long linear = first; linear < elements; linear += step) {
    unsigned long long rest = linear;
    long long offset = 0;
#pragma unroll
    for (int d = 7; d >= 0; --d) {
      unsigned long long size = static_cast<unsigned long long>(sizes[d]);
      offset += static_cast<long long>(rest % size) * strides[d];
      rest /= size;
    }
    const char* from = source + offset * static_cast<long long>(element_bytes);
    char* to = destination + linear * element_bytes;
    if (element_bytes == 8) {
      *reinterpret_cast<unsigned long long*>(to) = *reinterpret_cast<const unsigned long long*>(from);
    } else if (element_bytes == 4) {
      *reinterpret_cast<unsigned int*>(to) = *reinterpret_cast<const unsigned int*>(from);
    } else if (element_bytes == 2) {
      *reinterpret_cast<unsigned short*>(to) = *reinterpret_cast<const unsigned short*>(from);
    } else {
      *to = *from;
    }
  }
}
