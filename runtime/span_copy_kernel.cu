// Source of span_copy_kernel_ptx.inc (regenerate_ptx.sh): the
// byte copy grove puts at the head of a recorded graph, see span_copy_kernel.h.
// 16-byte vectors when both pointers allow them, then single bytes for the
// rest (or for everything when a pointer is not 16-byte aligned).
extern "C" __global__ void grove_copy_span(char* destination, const char* source,
                                           unsigned long long bytes) {
  unsigned long long first = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long vectored = 0;
  if (((reinterpret_cast<unsigned long long>(destination) |
        reinterpret_cast<unsigned long long>(source)) & 15) == 0) {
    unsigned long long vectors = bytes / 16;
    const uint4* from = reinterpret_cast<const uint4*>(source);
    uint4* to = reinterpret_cast<uint4*>(destination);
    for (unsigned long long i = first; i < vectors; i += stride) to[i] = from[i];
    vectored = vectors * 16;
  }
  for (unsigned long long i = vectored + first; i < bytes; i += stride) {
    destination[i] = source[i];
  }
}
