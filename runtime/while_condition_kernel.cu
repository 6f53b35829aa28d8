// The kernels that set a WHILE node's condition from the device (Note [While
// graphs], while_graph.h). They call cudaGraphSetConditional, which lives in
// libcudadevrt, so they ship as a linked fatbin (regenerate_fatbin.sh), not PTX.
#include <cstdint>

// condition = (*flag != 0).
extern "C" __global__ void grove_set_while_condition(cudaGraphConditionalHandle condition,
                                                     const int32_t* flag) {
  if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(condition, *flag != 0 ? 1u : 0u);
}

// --*remaining; condition = (*remaining > 0): a body that ends with it runs
// *remaining times per launch.
extern "C" __global__ void grove_while_count_down(cudaGraphConditionalHandle condition,
                                                  int64_t* remaining) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const int64_t left = *remaining - 1;
  *remaining = left;
  cudaGraphSetConditional(condition, left > 0 ? 1u : 0u);
}
