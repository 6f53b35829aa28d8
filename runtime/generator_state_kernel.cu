// Source of generator_state_kernel_ptx.inc (regenerate_ptx.sh): stores a
// Philox generator's seed and first counter, passed by value, into two i64
// scalars on the device, see philox_generator.h. One thread.
extern "C" __global__ void grove_store_generator_state(long long* seed, long long* offset,
                                                       long long seed_value,
                                                       long long offset_value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *seed = seed_value;
    *offset = offset_value;
  }
}
