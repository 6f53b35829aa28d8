#!/usr/bin/env bash
# Runs a test binary on asynchronous sim with the stream hazard checker
# throwing (Note [Asynchronous sim streams] in runtime/sim/sim_platform.cc):
# every sim stream runs on a worker of its own, so a missing event or a block
# reused early shows as a wrong value or a StreamHazardError naming both
# operations. Usage: on_async_sim.sh BINARY [ARGS...]
set -euo pipefail
export GROVE_SIM_ASYNC=1
export GROVE_SIM_CHECK=throw
exec "$@"
