# Session 33: out of memory through the door on cuda (Note [Out of memory is PyTorch's out of
# memory]): fill the GPU from PyTorch, call a compiled model that needs more, catch
# torch.cuda.OutOfMemoryError, free PyTorch's memory, call again.
import gc, torch, grove, grove.torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 16384), torch.nn.ReLU(), torch.nn.Linear(16384, 4096)).cuda()
for mode in ("cudagraphs", "eager"):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="grove", options={"mode": mode}, dynamic=False)
    x = torch.randn(16384, 4096, device="cuda")  # h: 16384 x 16384 f32 = 1 GiB
    free, total = torch.cuda.mem_get_info()
    hog = torch.empty(free - (512 << 20), dtype=torch.uint8, device="cuda")  # leave 512 MiB
    for attempt in range(2):
        try:
            with torch.no_grad():
                y = compiled(x)
            torch.cuda.synchronize()
            print(mode, "attempt", attempt, "no OOM (unexpected)")
        except torch.cuda.OutOfMemoryError as e:
            print(mode, "attempt", attempt, "torch OOM:", type(e).__name__, isinstance(e, grove.OutOfMemoryError), str(e)[:160])
        except Exception as e:
            print(mode, "attempt", attempt, "OTHER", type(e).__mro__, str(e)[:300])
    del hog; gc.collect(); torch.cuda.empty_cache()
    try:
        with torch.no_grad():
            y = compiled(x); y2 = compiled(x); ref = model(x)
        print(mode, "after freeing: max diff", float((y2 - ref).abs().max()))
    except Exception as e:
        print(mode, "after freeing FAILED", type(e).__name__, str(e)[:300])
    del x
    gc.collect(); torch.cuda.empty_cache()
print("current device", torch.cuda.current_device())
