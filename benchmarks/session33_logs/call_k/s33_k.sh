# Session 33 call K (1 GPU): generate() shapes users bring through the door (s33_gen.py).
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
timeout 280 python3 .gpu/s33_gen.py > $OUT/r/gen.txt 2>&1; echo "gen rc=$? s=$((SECONDS-start))"; grep -v -i "warn\|^\s*$" $OUT/r/gen.txt | tail -30 | cut -c1-300
echo "done total=$((SECONDS-start))"
