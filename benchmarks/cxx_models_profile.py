"""Per-kernel GPU time of the C++ benchmark models (backend_latency's rows: mlp16x512 b=1,
gpt4x256 b=1 T=32) through grove.compile's cudagraphs backend, under torch.profiler
(one process; the same graphs backend_latency replays from C++)."""
import json
import os
import sys
import time

import torch
import grove
from torch.profiler import ProfilerActivity, profile

DEVICE = os.environ.get("PROFILE_DEVICE", "cuda:0")
here = os.path.dirname(os.path.abspath(__file__))
for name, dims in (("mlp16x512", {"batch": 1}), ("gpt4x256", {"batch": 1, "seq": 32})):
    text = json.load(open(os.path.join(here, "models", name + ".json")))
    model = grove.compile(text, backend="cudagraphs", device=DEVICE, dims=dims)
    inputs = []
    for spec in text["inputs"]:
        shape = [dims[d] if isinstance(d, str) else d for d in spec["shape"]]
        if spec["dtype"] == "i64":
            inputs.append(torch.randint(0, 100, shape, device=DEVICE.split(":")[0] if DEVICE.startswith("cuda") else "cpu"))
        else:
            inputs.append(torch.randn(shape, device=DEVICE.split(":")[0] if DEVICE.startswith("cuda") else "cpu"))
    for _ in range(20):
        model(*inputs)
    DEVICE.startswith("cuda") and torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(200):
        model(*inputs)
    DEVICE.startswith("cuda") and torch.cuda.synchronize()
    call_us = (time.perf_counter() - start) / 200 * 1e6
    calls = 10
    if not DEVICE.startswith("cuda"):
        print(name, "%.1f us per call on %s" % (call_us, DEVICE))
        continue
    from torch.autograd import DeviceType
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            model(*inputs)
        torch.cuda.synchronize()
    by_name = {}
    for event in prof.events():
        if event.device_type != DeviceType.CUDA or event.name.startswith(("Memcpy", "Memset")):
            continue
        count, us = by_name.get(event.name, (0, 0.0))
        by_name[event.name] = (count + 1, us + event.time_range.elapsed_us())
    rows = sorted(((name, c / calls, us / calls) for name, (c, us) in by_name.items()),
                  key=lambda r: -r[2])
    total = sum(r[2] for r in rows)
    print("%s %s: %.1f us per call (Python), %.1f kernels, %.1f us GPU per call" % (
        name, dims, call_us, sum(r[1] for r in rows), total))
    for key, count, us in rows[:40]:
        print("   %-80s x%-4.1f %7.2f us" % (key[:80], count, us))
    model.close()
    sys.stdout.flush()
