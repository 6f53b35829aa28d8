# F2 lane B (GPU 1): wt-door's opt-in dynamo guards (GROVE_DOOR_STATIC_CHECK=guards): its test (the A/B of door_split is left out for device time).
(cd tests/python && timeout 40 python3 door_call_test.py -v > $OUT/tests/door_call_test.txt 2>&1; echo "door_call_test rc=$? $(tail -3 $OUT/tests/door_call_test.txt | tr '\n' ' ' | cut -c1-300)")
