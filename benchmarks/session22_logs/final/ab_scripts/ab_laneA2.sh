# F2 lane A (GPU 0) A/B: wt-decode's old defaults against the new, 16 sampling blocks at batch 64, bulk-copy GEMVs.
TAILN=20 ab decode_defaults 80 $B/benchmarks/decode/decode --configs 1b,small --batches 1,64 --steps 64 --repeats 3 --variants "GROVE_GEMV_ALLOW_NEXT_FIRST=0,GROVE_GEMV_RESIDUAL_FIRST=0,GROVE_GEMV_ROW_IN_REGISTERS=0,GROVE_SAMPLE_PARTS=1;GROVE_SAMPLE_PARTS=16;GROVE_GEMV_BULK=1" --json $OUT/ab/decode_ab.json
# wt-door's C apply against GROVE_DOOR_APPLY=python on ViT-tiny with SGD (the largest gain in r2), blocks in turn.
TAILN=12 ab door_vit_sgd 80 env GROVE_DOOR_APPLY=c python3 benchmarks/door_timeline.py --model vit_tiny --optimizer sgd --variants grove,floor,torch_reduce_overhead,grove+GROVE_DOOR_APPLY=python --rounds 10 --profile none
