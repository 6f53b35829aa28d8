"""Data parallel and mixed precision through the torch.compile door on GPUs
(NCCL, PyTorch 2.x): one process per GPU trains the same MLP and GPT
(gpu_models.py, small sizes) with

- torch: PyTorch's DistributedDataParallel, eager (the reference);
- door: torch.compile(DistributedDataParallel(model), backend="grove") with
  AOTAutograd's runtime (GROVE_DOOR_FUNCTION=0):
  dynamo's DDP optimizer splits the graph at DDP's bucket boundaries (the
  models are over DDP's first bucket of 1 MiB), grove compiles each piece, and DDP's all-reduces run
  between grove's graphs; the test checks grove compiled several graphs;
- grove_ddp: grove.torch.DistributedDataParallel, the all-reduces inside
  grove's backward graph (every parameter gradient reduced there);
- door_fn, grove_ddp_fn: the same two with grove's own autograd function, the default
  (GROVE_DOOR_FUNCTION=1, Note [The door's own autograd function]) (f32);
- grove_ddp_direct: grove_ddp_fn with GROVE_DOOR_GRADIENTS=direct (Note
  [Gradients set directly by the door's function]) (f32); like grove_ddp_fn,
  a second grove DDP in the process, which hung on two GPUs before Note
  [Communicators captured by graphs are never destroyed];
- step: grove.training.compile_step given the DDP model (the whole step in
  grove, the gradients averaged over DDP's group by one all-reduce);

in f32, under torch.autocast("cuda", dtype=torch.bfloat16) (RUNS lists
which), and for the MLP under float16 autocast with PyTorch's GradScaler;
under autocast the model's output has autocast's dtype.
Each rank trains on a batch of its own (an unreduced gradient would differ
from DDP's) from different initial weights (DDP's broadcast must fix them).

Tolerances against torch's DDP eager over 6 SGD steps: f32 losses and final
parameters within rtol 1e-3, atol 1e-5 (TF32 off; grove's GEMMs sum in
another order than cuBLAS's); bf16 autocast within rtol 3e-2, atol 3e-2
(bf16 keeps 8 mantissa bits; gpu_step_test.py's tolerance); fp16 within
rtol 1e-2, atol 1e-2 (11 bits). Both ranks end with equal parameters.

WorldOfOne runs on any CUDA host (a 1-process NCCL group: DDP's hooks and
grove's captured all-reduce still run); WorldOfTwo needs 2 CUDA devices.
CI (sim, gloo, PyTorch 1.13) covers the same in ddp_test.py and
grove_ddp_test.py."""
import copy
import os
import sys
import tempfile
import time
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as multiprocessing
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_models  # noqa: E402
import junit_main  # noqa: E402

STEPS = 6
SEED = 20261126
VARIANTS = ("torch", "door", "grove_ddp", "step")
FUNCTION_VARIANTS = ("door_fn", "grove_ddp_fn")  # with grove's own autograd function
# grove's DDP with GROVE_DOOR_GRADIENTS=direct (Note [Gradients set directly by
# the door's function]): its backward sets .grad, its graph averages them.
DIRECT_VARIANTS = ("grove_ddp_direct",)
# autocast dtype (None: f32) -> tolerance of losses and parameters
TOLERANCE = {None: {"rtol": 1e-3, "atol": 1e-5},
             torch.bfloat16: {"rtol": 3e-2, "atol": 3e-2},
             torch.float16: {"rtol": 1e-2, "atol": 1e-2}}
# (case, autocast dtype) -> variants run
RUNS = {("mlp", None): VARIANTS + FUNCTION_VARIANTS + DIRECT_VARIANTS,
        ("mlp", torch.bfloat16): VARIANTS,
        ("mlp", torch.float16): ("torch", "door", "grove_ddp"),
        ("gpt", None): VARIANTS + FUNCTION_VARIANTS + DIRECT_VARIANTS,
        ("gpt", torch.bfloat16): ("torch", "door", "grove_ddp")}


def has_dynamo():
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:
        return False
    return True


def cases(rank):
    """(name, module, batch, loss_fn): rank's own batch, its own initial weights."""
    torch.manual_seed(SEED + rank)
    # Over DDP's first bucket (1 MiB): dynamo's DDP optimizer splits the graph.
    mlp = gpu_models.Mlp(width=512, depth=4).cuda()  # 4.2 MB of parameters
    gpt = gpu_models.Gpt(vocab=256, width=128, heads=4, layers=3, max_len=32).cuda()  # 2.7 MB
    generator = torch.Generator(device="cuda").manual_seed(SEED + 100 + rank)
    x = torch.randn(16, 512, device="cuda", generator=generator)
    target = torch.randn(16, 512, device="cuda", generator=generator)
    tokens = torch.randint(0, 256, (4, 17), device="cuda", generator=generator)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].reshape(-1).contiguous()
    return [
        ("mlp", mlp, (x,), lambda out: F.mse_loss(out.float(), target)),
        ("gpt", gpt, (inputs,), lambda out: F.cross_entropy(out.float().reshape(-1, 256), labels)),
    ]


def train(variant, module, batch, loss_fn, rank, autocast, compiled):
    import grove.torch
    from grove import door_function, dynamo_backend

    if variant.endswith("_direct"):
        os.environ["GROVE_DOOR_GRADIENTS"] = "direct"  # read when the first step compiles
        direct = door_function.direct_taken
        try:
            result = train(variant[:-len("_direct")] + "_fn", module, batch, loss_fn, rank,
                           autocast, compiled)
        finally:
            del os.environ["GROVE_DOOR_GRADIENTS"]
        result["direct_functions"] = door_function.direct_taken - direct
        return result
    if "GROVE_DOOR_FUNCTION" not in os.environ:
        # Note [The door's own autograd function] (the default, read when the
        # first step compiles the graphs): on for the "_fn" variants, off
        # (AOTAutograd's runtime) for the others.
        on = variant.endswith("_fn")
        os.environ["GROVE_DOOR_FUNCTION"] = "1" if on else "0"
        taken = door_function.taken
        try:
            result = train(variant[:-len("_fn")] if on else variant, module, batch, loss_fn,
                           rank, autocast, compiled)
        finally:
            del os.environ["GROVE_DOOR_FUNCTION"]
        if on:
            result["door_functions"] = door_function.taken - taken
        return result
    torch._dynamo.reset()
    model = copy.deepcopy(module)
    if variant == "grove_ddp":
        run = grove.torch.DistributedDataParallel(model, bucket_cap_mb=0.01, device_ids=[rank])
    else:
        # PyTorch's default buckets (dynamo's DDP optimizer refuses caps
        # under its 1 MiB first bucket).
        run = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
        if variant == "door":

            def counting(gm, example_inputs):
                compiled.append(len(gm.graph.nodes))
                return dynamo_backend.grove_backend(gm, example_inputs)

            run = torch.compile(run, backend=counting, dynamic=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # fp16 autocast: PyTorch's loss scaling around grove's graphs.
    scaler = torch.amp.GradScaler("cuda", enabled=autocast == torch.float16)
    cast = torch.autocast("cuda", dtype=autocast or torch.bfloat16, enabled=autocast is not None)
    if variant == "step":  # the whole step, given PyTorch's DDP model
        import grove.training

        whole = grove.training.compile_step(run, lambda forward, *args: loss_fn(forward(*args)),
                                            optimizer)
    losses, output_dtypes = [], set()
    for _ in range(STEPS):
        if variant == "step":
            with cast:
                loss = whole(*batch)
        else:
            optimizer.zero_grad(set_to_none=True)
            with cast:
                out = run(*batch)
                loss = loss_fn(out)
            output_dtypes.add(out.dtype)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        mean = loss.detach().float().clone()
        dist.all_reduce(mean)
        losses.append(mean / dist.get_world_size())
    reduction = run.gradient_reduction() if variant == "grove_ddp" else None
    return {"losses": torch.stack(losses).cpu(), "reduction": reduction,
            "output_dtypes": output_dtypes,
            "params": [p.detach().cpu().clone() for p in model.parameters()]}


# A child that runs longer than this dumps every thread's stack and exits, so a
# hung collective fails the class with the place it hung (sessions 18 and 19:
# a second grove DDP hung in its communicator's replacement, Note
# [Communicators captured by graphs are never destroyed]) instead of running
# into the caller's time limit.
CHILD_LIMIT_S = float(os.environ.get("GPU_DDP_DOOR_CHILD_LIMIT_S", "170"))


def train_rank(rank, world, rendezvous, folder):
    import faulthandler

    faulthandler.dump_traceback_later(CHILD_LIMIT_S, exit=True)
    torch.cuda.set_device(rank)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl", init_method="file://" + rendezvous, rank=rank,
                            world_size=world)
    results = {}
    try:
        for name, module, batch, loss_fn in cases(rank):
            for autocast in (None, torch.bfloat16, torch.float16):
                for variant in RUNS.get((name, autocast), ()):
                    compiled = []
                    started = time.monotonic()
                    try:
                        result = train(variant, module, batch, loss_fn, rank, autocast, compiled)
                        result["graphs"] = len(compiled)
                    except Exception as error:  # reported by the parent, the rest still run
                        result = {"error": "%s: %s" % (type(error).__name__, error)}
                    results[(name, autocast, variant)] = result
                    if rank == 0:  # progress, should the run be cut short
                        print("rank 0 %s %s %s: %.1f s%s" % (
                            name, autocast or "f32", variant,
                            time.monotonic() - started,
                            " " + result["error"][:200] if "error" in result else ""),
                            flush=True)
    finally:
        torch.save(results, os.path.join(folder, "rank%d.pt" % rank))
        dist.destroy_process_group()
    # PyTorch 2.11 aborted this child once in the interpreter's final garbage
    # collection (THPVariable_clear: INTERNAL ASSERT use_count() == 1), after
    # every run had ended and its results were written; reported, not fixed
    # here. The results are on disk, so the child ends without that collection.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class WorldOfOne(unittest.TestCase):
    world = 1

    @classmethod
    def setUpClass(cls):
        if not torch.cuda.is_available():
            raise unittest.SkipTest("no CUDA device")
        if torch.cuda.device_count() < cls.world:
            raise unittest.SkipTest("needs %d CUDA devices, found %d (NCCL, one process per "
                                    "GPU)" % (cls.world, torch.cuda.device_count()))
        if not has_dynamo():
            raise unittest.SkipTest("this PyTorch has no torch._dynamo (torch.compile)")
        cls.folder = tempfile.TemporaryDirectory()
        rendezvous = os.path.join(cls.folder.name, "rendezvous")
        multiprocessing.spawn(train_rank, args=(cls.world, rendezvous, cls.folder.name),
                              nprocs=cls.world)
        cls.results = [torch.load(os.path.join(cls.folder.name, "rank%d.pt" % rank),
                                  weights_only=False)
                       for rank in range(cls.world)]

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def check(self, name, autocast, variant):
        for rank, results in enumerate(self.results):
            ours, theirs = results[(name, autocast, variant)], results[(name, autocast, "torch")]
            where = "%s %s %s rank %d" % (name, autocast or "f32", variant, rank)
            self.assertNotIn("error", theirs, where + ": torch DDP failed")
            self.assertNotIn("error", ours, where)
            torch.testing.assert_close(ours["losses"], theirs["losses"], **TOLERANCE[autocast],
                                       msg=lambda m: "%s losses: %s" % (where, m))
            for index, (a, b) in enumerate(zip(ours["params"], theirs["params"])):
                torch.testing.assert_close(a, b, **TOLERANCE[autocast], msg=lambda m: (
                    "%s parameter %d: %s" % (where, index, m)))
            if autocast is not None and variant != "step":
                # The model's output under autocast: the cast reached the graphs.
                self.assertEqual(ours["output_dtypes"], {autocast}, where)
            if variant.startswith("door"):
                # DDP's buckets split the graph: grove's graphs run between
                # the all-reduces (one compiled graph would mean no split).
                self.assertGreater(ours["graphs"], 1, where)
            if variant == "grove_ddp_fn":
                # (door_fn: dynamo's split pieces may keep AOTAutograd's runtime,
                # Note [The door's own autograd function]; its losses are checked.)
                self.assertGreater(ours["door_functions"], 0,
                                   where + ": no graph ran as grove's own autograd function")
            if variant.endswith("_direct"):
                self.assertGreater(ours["direct_functions"], 0,
                                   where + ": no graph set its gradients directly")
            if variant.startswith("grove_ddp"):
                in_grove, left = ours["reduction"]
                self.assertEqual(left, 0, where + ": gradients left to torch.distributed")
                self.assertEqual(in_grove, len(ours["params"]), where)
        first = self.results[0][(name, autocast, variant)]["params"]
        for results in self.results[1:]:
            for a, b in zip(first, results[(name, autocast, variant)]["params"]):
                self.assertTrue(torch.equal(a, b), "ranks hold different parameters")
        losses = self.results[0][(name, autocast, "torch")]["losses"]
        self.assertLess(losses[-1].item(), losses[0].item(), "training lowers the loss")

    def test_mlp_door_under_ddp(self):
        self.check("mlp", None, "door")

    def test_mlp_grove_ddp(self):
        self.check("mlp", None, "grove_ddp")

    def test_mlp_bf16_autocast_door_under_ddp(self):
        self.check("mlp", torch.bfloat16, "door")

    def test_mlp_bf16_autocast_grove_ddp(self):
        self.check("mlp", torch.bfloat16, "grove_ddp")

    # Note [Fake calls of the door's function] (door_function.py): dynamo's
    # DDP optimizer calls the pieces on fake tensors (r3, one H100, PyTorch
    # 2.11: BackendCompilerFailed before that note's fix).
    def test_mlp_door_under_ddp_with_the_doors_own_function(self):
        self.check("mlp", None, "door_fn")

    def test_mlp_grove_ddp_with_the_doors_own_function(self):
        self.check("mlp", None, "grove_ddp_fn")

    # Note [Fake calls of the door's function] (door_function.py): dynamo's
    # DDP optimizer calls the pieces on fake tensors (r3, one H100, PyTorch
    # 2.11: BackendCompilerFailed before that note's fix).
    def test_gpt_door_under_ddp_with_the_doors_own_function(self):
        self.check("gpt", None, "door_fn")

    def test_gpt_grove_ddp_with_the_doors_own_function(self):
        self.check("gpt", None, "grove_ddp_fn")

    def test_mlp_grove_ddp_with_direct_gradients(self):
        self.check("mlp", None, "grove_ddp_direct")

    def test_gpt_grove_ddp_with_direct_gradients(self):
        self.check("gpt", None, "grove_ddp_direct")

    def test_mlp_whole_step_of_a_ddp_model(self):
        self.check("mlp", None, "step")

    def test_mlp_bf16_autocast_whole_step_of_a_ddp_model(self):
        self.check("mlp", torch.bfloat16, "step")

    def test_gpt_whole_step_of_a_ddp_model(self):
        self.check("gpt", None, "step")

    def test_mlp_fp16_autocast_with_grad_scaler_door_under_ddp(self):
        self.check("mlp", torch.float16, "door")

    def test_mlp_fp16_autocast_with_grad_scaler_grove_ddp(self):
        self.check("mlp", torch.float16, "grove_ddp")

    def test_gpt_door_under_ddp(self):
        self.check("gpt", None, "door")

    def test_gpt_grove_ddp(self):
        self.check("gpt", None, "grove_ddp")

    def test_gpt_bf16_autocast_door_under_ddp(self):
        self.check("gpt", torch.bfloat16, "door")

    def test_gpt_bf16_autocast_grove_ddp(self):
        self.check("gpt", torch.bfloat16, "grove_ddp")


class WorldOfTwo(WorldOfOne):
    world = 2


if __name__ == "__main__":
    junit_main.main()
