// Source of the PTX embedded in test_kernels.cc (regenerate with
// runtime/testing/regenerate_test_kernels.sh). Each kernel mirrors a host
// function there with the same argument slots.
extern "C" __global__ void grove_test_fill_f32(float* out, long long n, float value) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
extern "C" __global__ void grove_test_add_f32(const float* a, const float* b, float* out,
                                              long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
extern "C" __global__ void grove_test_scale_f32(const float* in, float* out, long long n,
                                                float factor) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}
extern "C" __global__ void grove_test_add_scalar_inplace_f32(float* x, long long n, float value) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] += value;
}
