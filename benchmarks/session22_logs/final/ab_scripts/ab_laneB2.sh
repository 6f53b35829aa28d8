# F2 lane B (GPU 1): door_function_test's held-outputs test on PyTorch 2.x with the Python apply (wt-door's open question:
# outputs_overwritten 6 where 0 is expected, with the new C apply).
(cd tests/python && GROVE_DOOR_APPLY=python timeout 40 python3 door_function_test.py DoorFunctionTest.test_outputs_held_across_steps_hold_no_activations > $OUT/tests/door_held_python_apply.txt 2>&1; echo "door held-outputs test, Python apply: rc=$? $(tail -3 $OUT/tests/door_held_python_apply.txt | tr '\n' ' ' | cut -c1-300)")
# wt-zoo's three new kernel defaults off (fast erf, chunked elementwise, short rows) at batch 16.
TAILN=30 ab zoo_old_kernels 110 python3 benchmarks/torch_zoo.py --cases vit:16,mlp_mixer:16 --variants torch_reduce_overhead,grove,grove_old --grove-env old:GROVE_FAST_ERF=0+GROVE_CHUNKED_ELEMENTWISE=0+GROVE_WARP_HELD_ROWS=0 --top 12 --repeats 20 --budget-s 100 --json $OUT/ab/torch_zoo_wtzoo_ab.json
