# Session 33 call H (1 GPU): inputs aliasing each other with one written in place, through the door.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
timeout 200 python3 .gpu/s33_alias.py > $OUT/r/alias.txt 2>&1; echo "alias rc=$? s=$((SECONDS-start))"; grep -v -i "warn" $OUT/r/alias.txt | tail -20 | cut -c1-300
echo "done total=$((SECONDS-start))"
