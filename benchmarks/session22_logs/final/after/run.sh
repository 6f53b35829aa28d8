mkdir -p /tmp/lib && [ -f /tmp/lib/libgrove.so ] || xz -dc .gpu/lib.xz > /tmp/lib/libgrove.so
export GROVE_LIBRARY=/tmp/lib/libgrove.so PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python:$PWD/.gpu/diag
timeout 40 python3 .gpu/diag/door_held_diag.py 2>&1 | grep -E "^step|^  tree"
cd tests/python && timeout 60 python3 -m unittest -v door_function_test.DoorFunctionTest.test_outputs_held_across_steps_hold_no_activations 2>&1 | grep -E "^test_|^Ran|^OK|^FAIL|Error"
timeout 60 python3 -m unittest door_function_test.DoorFunctionTest.test_a_retained_graph_runs_its_backward_twice door_function_test.DoorFunctionTest.test_outputs_held_across_steps_hold_no_activations 2>&1 | grep -E "^Ran|^OK|^FAIL|Error"
