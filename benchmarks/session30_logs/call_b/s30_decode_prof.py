"""Session 30: where HF LLaMA static-cache generate's time goes through grove (436 tok/s in the
lease against 619 in session 23's): cProfile of one steady generate call after torch_zoo's timed
calls, sorted by total and by own time."""
import cProfile, io, pstats, sys
sys.path.insert(0, "benchmarks")
import torch_zoo

def profiled(function):
    profile = cProfile.Profile()
    profile.enable()
    function()
    import torch
    torch.cuda.synchronize()
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)
    return out.getvalue()

torch_zoo.decode_profile = profiled
torch_zoo.PROFILE_DECODE = "hf_llama_static_cache"
import grove.torch  # noqa: F401  (registers the backend)
variant = sys.argv[1] if len(sys.argv) > 1 else "grove"
measured = torch_zoo.hf_decode(variant)
print("%s: %.1f tokens/s, first call %.1f, recordings %s" % (
    variant, measured["tokens_per_s"], measured["first_tokens_per_s"], measured["recordings"]))
print(measured["profile"])
