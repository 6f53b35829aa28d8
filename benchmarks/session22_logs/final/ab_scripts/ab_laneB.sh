# F1 lane B (GPU 1) A/B: wt-door's C apply (default) against GROVE_DOOR_APPLY=python, with the floor and RO, mlp, blocks in turn.
TAILN=12 ab door_mlp 55 env GROVE_DOOR_APPLY=c python3 benchmarks/door_timeline.py --model mlp16x512_b32 --variants grove,floor,torch_reduce_overhead,grove+GROVE_DOOR_APPLY=python --rounds 12 --profile none
