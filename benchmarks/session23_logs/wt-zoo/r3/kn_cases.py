"""A few cases of gpu_small_m_gemm_test's [K, N] test (the whole test did not finish in r2's
14 s): each through grove.compile (cudagraphs and eager) with a forced tile and
GROVE_SMALL_M_TILED_KN=1, against float64; prints one line per case, then PASSED or FAILED."""
import sys

import gpu_small_m_gemm_test as t

case = t.GpuSmallMTiledGemmTest("test_k_by_n_weights_match_the_reference_with_partial_tiles")
case.setUp()
failed = 0
for tile, m, k, n, act, bias in [("8x1", 5, 256, 36, "none", False),
                                 ("16x2x8", 48, 128, 300, "none", False),
                                 ("4x2", 32, 1024, 256, "none", False),
                                 ("16x1", 3, 20, 64, "none", False),
                                 ("8x2", 32, 256, 768, "none", True),
                                 ("4x1x8", 16, 512, 520, "gelu_tanh", True),
                                 ("16x2", 7, 256, 128, "relu", True),
                                 ("8x1x4", 32, 1024, 256, "none", True)]:
    try:
        case.run_kn_case(tile, m, k, n, act, bias)
        print("ok   tile %s m=%d k=%d n=%d %s bias=%s" % (tile, m, k, n, act, bias), flush=True)
    except Exception as error:  # report every case
        failed += 1
        print("FAIL tile %s m=%d k=%d n=%d %s bias=%s: %s" % (tile, m, k, n, act, bias,
                                                           str(error)[:300]), flush=True)
print("FAILED %d" % failed if failed else "PASSED")
sys.exit(1 if failed else 0)
