"""grove.torch.DistributedDataParallel on sim: two processes (gloo for
torch.distributed, CPU tensors, grove on sim over its TCP socket group) train
an MLP whose gradients grove all-reduces inside its backward program (Note
[Gradient all-reduce in the door's backward], python/grove/gradient_reduce.py),
against PyTorch's DistributedDataParallel on the same data: each step's
averaged loss and every parameter's .grad (all six reduced inside grove's
backward, none by the torch.distributed fallback) (the mean over ranks) agree within
f32 rounding, on both ranks, in grove's "eager" and "cudagraphs" modes. Each
rank trains on a batch of its own, so unreduced gradients would differ from
DDP's. The same under bf16 autocast, within bf16 tolerance. Also: rank 0's
buffers reach every rank before each forward; no_sync() and device_ids for a
CPU module are refused with a message; the group id of a sim device names a
TCP endpoint and a wrong id is refused with a message."""
import ctypes
import gc
import os
import sys
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as multiprocessing
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import junit_main  # noqa: E402

WORLD = 2
STEPS = 4
SEED = 20261126


def train_rank(rank, rendezvous, mode, folder, device="cpu"):
    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group("nccl" if cuda else "gloo", init_method="file://" + rendezvous,
                            rank=rank, world_size=WORLD)
    try:
        import grove.torch

        torch.manual_seed(SEED + rank)  # different initial weights: the broadcast must fix them
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.Linear(32, 32),
                              nn.ReLU(), nn.Linear(32, 16))
        if cuda:
            model = model.cuda()
        # "<mode>_bf16": the forward under torch.autocast(dtype=torch.bfloat16).
        grove_mode, autocast = mode.split("_")[0], mode.endswith("_bf16")
        if grove_mode == "torch":
            ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001,
                                                      device_ids=[rank] if cuda else None)
        else:
            # Small buckets: several all-reduces in the backward program.
            ddp = grove.torch.DistributedDataParallel(model, bucket_cap_mb=0.001,
                                                      mode=grove_mode)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        torch.manual_seed(SEED + 100 + rank)  # each rank its own batch
        x, target = torch.randn(8, 16).to(device), torch.randn(8, 16).to(device)
        losses, gradients = [], []
        for _ in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                loss = F.mse_loss(ddp(x).float(), target)
            loss.backward()
            gradients.append([p.grad.detach().clone().cpu() for p in model.parameters()])
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append((mean / WORLD).cpu())
        reduction = ddp.gradient_reduction() if grove_mode != "torch" else None
        if grove_mode != "torch":  # the wrapper's state is the module's, named once
            assert [name for name, _ in ddp.named_parameters()] == [
                "module." + name for name, _ in model.named_parameters()]
        torch.save({"losses": torch.stack(losses), "gradients": gradients,
                    "reduction": reduction},
                   os.path.join(folder, "%s_rank%d.pt" % (mode, rank)))
    finally:
        dist.destroy_process_group()


class Shifted(nn.Module):
    """A linear layer whose output is moved by a buffer (state DDP broadcasts)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("shift", torch.zeros(4))

    def forward(self, x):
        return self.linear(x) + self.shift


def buffers_rank(rank, rendezvous, folder, mode):
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank,
                            world_size=WORLD)
    try:
        import grove.torch

        torch.manual_seed(SEED + rank)
        model = Shifted()
        model.shift.fill_(10.0 * (rank + 1))  # the broadcast must give rank 0's
        if mode == "torch":
            ddp = nn.parallel.DistributedDataParallel(model)
        else:
            ddp = grove.torch.DistributedDataParallel(model, mode=mode)
        x = torch.ones(2, 4)
        outputs, shifts = [], []
        for _ in range(3):
            if rank == 0:
                model.shift.add_(1.0)  # rank 0's change reaches every rank's next forward
            out = ddp(x)
            out.sum().backward()
            outputs.append(out.detach().clone())
            shifts.append(model.shift.clone())
        torch.save({"outputs": outputs, "shifts": shifts},
                   os.path.join(folder, "buffers_%s_rank%d.pt" % (mode, rank)))
        del ddp  # before the process group (see the comment in ddp_test.py's train_rank)
        gc.collect()
    finally:
        dist.destroy_process_group()


class BroadcastBuffersTest(unittest.TestCase):
    def test_rank_zeros_buffers_reach_every_rank_before_each_forward_as_in_torch_ddp(self):
        with tempfile.TemporaryDirectory() as folder:
            results = {}
            for mode in ("torch", "cudagraphs"):
                multiprocessing.spawn(buffers_rank, args=(os.path.join(folder, "r_" + mode),
                                                          folder, mode), nprocs=WORLD)
                results[mode] = [torch.load(os.path.join(folder, "buffers_%s_rank%d.pt"
                                                         % (mode, rank)))
                                 for rank in range(WORLD)]
        for rank in range(WORLD):
            for step in range(3):
                # rank 0's 10, plus one per step: broadcast at wrapping and before each forward
                self.assertTrue(torch.equal(results["cudagraphs"][rank]["shifts"][step],
                                            torch.full((4,), 11.0 + step)))
                torch.testing.assert_close(results["cudagraphs"][rank]["outputs"][step],
                                           results["torch"][rank]["outputs"][step],
                                           rtol=1e-5, atol=1e-5)


class GroveDistributedDataParallelTest(unittest.TestCase):
    """CPU tensors, gloo, grove on sim."""

    device = "cpu"
    tolerance = {"rtol": 1e-4, "atol": 1e-5}

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        cls.results = {}
        for mode in ("torch", "eager", "cudagraphs", "torch_bf16", "cudagraphs_bf16"):
            rendezvous = os.path.join(cls.folder.name, "rendezvous_" + mode)
            multiprocessing.spawn(train_rank,
                                  args=(rendezvous, mode, cls.folder.name, cls.device),
                                  nprocs=WORLD)
            cls.results[mode] = [torch.load(os.path.join(cls.folder.name, "%s_rank%d.pt"
                                                         % (mode, rank)))
                                 for rank in range(WORLD)]

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def check_mode(self, mode, reference="torch", tolerance=None):
        tolerance = tolerance or self.tolerance
        for rank in range(WORLD):
            # Every parameter gradient is reduced inside grove's backward
            # program, none by the torch.distributed fallback.
            self.assertEqual(self.results[mode][rank]["reduction"], (6, 0))
            grove_run, torch_run = self.results[mode][rank], self.results[reference][rank]
            torch.testing.assert_close(grove_run["losses"], torch_run["losses"],
                                       **tolerance)
            for step, (ours, theirs) in enumerate(zip(grove_run["gradients"],
                                                      torch_run["gradients"])):
                self.assertEqual(len(ours), len(theirs))
                for index, (a, b) in enumerate(zip(ours, theirs)):
                    torch.testing.assert_close(a, b, **tolerance, msg="%s rank %d step %d parameter %d"
                                               % (mode, rank, step, index))
        # The gradients are the mean over ranks: equal on both ranks.
        for ours, theirs in zip(self.results[mode][0]["gradients"],
                                self.results[mode][1]["gradients"]):
            for a, b in zip(ours, theirs):
                self.assertTrue(torch.equal(a, b), "%s: ranks hold different gradients" % mode)

    def test_eager_gradients_and_losses_equal_torch_ddp(self):
        self.check_mode("eager")

    def test_cudagraphs_gradients_and_losses_equal_torch_ddp(self):
        self.check_mode("cudagraphs")

    def test_bf16_autocast_gradients_and_losses_within_bf16_of_torch_ddp(self):
        """The forward under torch.autocast(dtype=torch.bfloat16): rtol and
        atol 2e-2 of PyTorch's DDP under the same autocast (step_test.py's
        bf16 tolerance); autocast did change the losses."""
        self.check_mode("cudagraphs_bf16", reference="torch_bf16",
                        tolerance={"rtol": 2e-2, "atol": 2e-2})
        self.assertFalse(torch.equal(self.results["torch_bf16"][0]["losses"],
                                     self.results["torch"][0]["losses"]))

    def test_torch_losses_fall(self):
        losses = self.results["torch"][0]["losses"]
        self.assertLess(losses[-1].item(), losses[0].item())


@unittest.skipUnless(torch.cuda.is_available() and torch.cuda.device_count() >= 2,
                     "needs 2 CUDA devices (NCCL); the sim test above runs everywhere")
class CudaGroveDistributedDataParallelTest(GroveDistributedDataParallelTest):
    """Two GPUs, NCCL for torch.distributed and grove's group; on PyTorch 2.x
    the wrapper compiles through torch.compile with grove's backend. grove's
    and cuBLAS's GEMMs may sum in other orders: f32 rounding."""

    device = "cuda"
    tolerance = {"rtol": 1e-3, "atol": 1e-5}


class BackwardReductionTest(unittest.TestCase):
    def test_grove_reduces_parameter_gradients_its_segments_compute_and_torch_the_rest(self):
        from grove import gradient_reduce

        graph = torch.fx.Graph()
        nodes = [graph.placeholder("g%d" % i) for i in range(4)]
        # Forward inputs 0, 2 and 3 are parameters; the backward returns None for input 1.
        items = [nodes[0], None, nodes[2], nodes[3]]
        reduction = gradient_reduce.BackwardReduction({"op": "mean", "bucket_bytes": 64},
                                                      frozenset({0, 2, 3}), items)
        # A segment returning an activation gradient (nodes[1]) and two parameter gradients.
        self.assertEqual(reduction.segment_option([nodes[1], nodes[3], nodes[0]]),
                         {"op": "mean", "bucket_bytes": 64, "outputs": [1, 2]})
        self.assertIsNone(reduction.segment_option([nodes[1]]))
        self.assertEqual(reduction.left_to_torch(), [2])  # nodes[2]: no grove segment made it

    def test_gradients_left_to_torch_are_averaged_over_ranks(self):
        from grove import gradient_reduce

        with tempfile.TemporaryDirectory() as folder:
            dist.init_process_group("gloo", init_method="file://" + os.path.join(folder, "r"),
                                    rank=0, world_size=1)
            try:
                gradient = torch.randn(3)
                out = gradient_reduce.reduce_in_torch([gradient, None], [0, 1])
                self.assertIsNot(out[0], gradient)  # grove's memory is never written
                torch.testing.assert_close(out[0], gradient)  # world of one: the mean is itself
                self.assertIsNone(out[1])
            finally:
                dist.destroy_process_group()


class GroupIdTest(unittest.TestCase):
    def test_wrapping_before_init_process_group_is_refused(self):
        import grove.torch

        self.assertFalse(dist.is_initialized())
        with self.assertRaisesRegex(RuntimeError, "init_process_group first"):
            grove.torch.DistributedDataParallel(nn.Linear(2, 2))

    def test_no_sync_is_refused_with_what_to_use_instead(self):
        import grove.torch
        from grove import ddp as grove_ddp

        with tempfile.TemporaryDirectory() as folder:
            dist.init_process_group("gloo", init_method="file://" + os.path.join(folder, "r"),
                                    rank=0, world_size=1)
            try:
                ddp = grove.torch.DistributedDataParallel(nn.Linear(4, 4), mode="eager")
                try:
                    with self.assertRaisesRegex(NotImplementedError, "every backward reduces"):
                        ddp.no_sync()
                    # PyTorch DDP's device_ids name no device for a CPU module.
                    with self.assertRaisesRegex(ValueError, "pass none for a CPU module"):
                        grove.torch.DistributedDataParallel(nn.Linear(4, 4), device_ids=[0])
                    # Still usable: a world of one trains, both gradients reduced in grove.
                    ddp(torch.randn(3, 4)).sum().backward()
                    self.assertIsNotNone(ddp.module.weight.grad)
                    self.assertEqual(ddp.gradient_reduction(), (2, 0))
                finally:
                    grove_ddp.leave_group(ddp.grove_device)
            finally:
                dist.destroy_process_group()

    def test_compile_step_of_a_ddp_model_trains_its_module_and_refuses_buffers(self):
        import grove.training

        with tempfile.TemporaryDirectory() as folder:
            dist.init_process_group("gloo", init_method="file://" + os.path.join(folder, "r"),
                                    rank=0, world_size=1)
            try:
                def loss_fn(forward, x):
                    return forward(x).square().mean()

                model = Shifted()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                with self.assertRaisesRegex(ValueError, "does not broadcast rank 0's buffers"):
                    grove.training.compile_step(nn.parallel.DistributedDataParallel(model),
                                                loss_fn, optimizer)
                with self.assertRaisesRegex(ValueError, "pass no other process_group"):
                    grove.training.compile_step(
                        nn.parallel.DistributedDataParallel(model, broadcast_buffers=False),
                        loss_fn, optimizer, process_group=dist.new_group([0]))
                step = grove.training.compile_step(
                    nn.parallel.DistributedDataParallel(model, broadcast_buffers=False),
                    loss_fn, optimizer, mode="eager")
                self.assertIs(step.module, model)
                self.assertIs(step.process_group, dist.group.WORLD)
                x = torch.randn(3, 4)
                expected = (model(x)).square().mean()
                torch.testing.assert_close(step(x), expected)
            finally:
                gc.collect()  # the DDP wrappers before the process group (ddp_test.py)
                dist.destroy_process_group()

    def test_sim_group_id_is_a_tcp_endpoint_and_a_bad_id_is_refused(self):
        from grove import _capi

        lib = _capi.library()
        buffer = ctypes.create_string_buffer(_capi.GROUP_ID_MAX)
        size = ctypes.c_size_t()
        _capi.check(lib.grove_group_new_id(b"sim", buffer, len(buffer), ctypes.byref(size)))
        self.assertRegex(buffer.raw[:size.value].decode(), r"^tcp:[^:]+:\d+$")
        with self.assertRaisesRegex(_capi.GroveError, "needs a group id"):
            _capi.check(lib.grove_group_join(b"sim", 0, 2, b"nonsense", 8, 1000))
        with self.assertRaisesRegex(_capi.GroveError, "outside"):
            _capi.check(lib.grove_group_join(b"sim", 2, 2, b"tcp:127.0.0.1:1", 15, 1000))
        tiny = ctypes.create_string_buffer(2)
        with self.assertRaisesRegex(_capi.GroveError, "capacity"):
            _capi.check(lib.grove_group_new_id(b"sim", tiny, 2, ctypes.byref(size)))


if __name__ == "__main__":
    junit_main.main()
