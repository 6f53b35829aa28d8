"""grove.torch.DistributedDataParallel: data parallel through the door with
the gradient all-reduces inside grove's backward graph.

    torch.distributed.init_process_group("nccl")     # under torchrun
    torch.cuda.set_device(local_rank)
    model = grove.torch.DistributedDataParallel(model.cuda())
    loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

PyTorch's DistributedDataParallel runs its bucketed all-reduces from autograd
hooks, between grove's graphs (under torch.compile, dynamo splits the graph
at every bucket). This wrapper instead joins a grove collective group for the
module's device (rank 0 makes the group id and torch.distributed hands it to
the others: Note [Group ids handed out by the caller],
runtime/collectives/setup.h), broadcasts parameters and buffers from rank 0
as PyTorch's DDP does, and compiles the module's training step through grove
with mean all-reduces over the parameter gradients appended to the backward
program (Note [Gradient all-reduce in the door's backward],
gradient_reduce.py): on cuda they are captured in the backward's CUDA graph.
After backward(), every rank's `.grad` holds the mean over ranks, as with
PyTorch's DDP. No no_sync() (every backward reduces), and the module must take
the same path on every rank (every rank runs the same collectives).
"""

import ctypes
import os

import torch
import torch.distributed as dist

from grove import _capi, gradient_reduce


def _grove_device(module, device):
    if device is not None:
        return device
    for tensor in list(module.parameters()) + list(module.buffers()):
        if tensor.is_cuda:
            return "cuda:%d" % tensor.device.index
        break
    return "sim"


def _check_device_ids(module, device_ids, output_device):
    """PyTorch DDP's device_ids and output_device, accepted where they name
    the one device the module is on (as PyTorch's DDP takes them for a
    single-device module), so the wrapper can replace it in a script."""
    devices = {t.device for t in list(module.parameters()) + list(module.buffers())}
    named = list(device_ids or []) + ([] if output_device is None else [output_device])
    if not named:
        return
    where = ("grove.torch.DistributedDataParallel: device_ids=%r, output_device=%r"
             % (device_ids, output_device))
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        raise ValueError("%s name devices, but the module is on %s; as PyTorch's DDP, pass "
                         "none for a CPU module" % (where, sorted(map(str, devices))))
    (module_device,) = devices
    for value in named:
        given = torch.device("cuda", value) if isinstance(value, int) else torch.device(value)
        if given != module_device or (device_ids is not None and len(device_ids) != 1):
            raise ValueError("%s: grove trains a module on one device, here %s; name that "
                             "one device (or none)" % (where, module_device))


def _timeout_ms():
    return int(os.environ.get("GROVE_COLLECTIVE_TIMEOUT_MS", "120000"))


def join_group(device, group=None):
    """Joins this process to a grove collective group of torch.distributed's
    ranks for `device` ("cuda:1", "sim"): rank 0 makes the group id, the
    others receive it through torch.distributed."""
    lib = _capi.library()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    message = [None]
    if rank == 0:
        buffer = ctypes.create_string_buffer(_capi.GROUP_ID_MAX)
        size = ctypes.c_size_t()
        _capi.check(lib.grove_group_new_id(device.encode(), buffer, len(buffer),
                                           ctypes.byref(size)))
        message = [buffer.raw[:size.value]]
    dist.broadcast_object_list(message, src=0, group=group)
    group_id = message[0]
    _capi.check(lib.grove_group_join(device.encode(), rank, world, group_id, len(group_id),
                                     _timeout_ms()))


def leave_group(device):
    _capi.check(_capi.library().grove_group_leave(device.encode()))


class DistributedDataParallel(torch.nn.Module):
    """`module` trained through grove on every rank of torch.distributed's
    default group, its parameter gradients averaged inside grove's backward.

    bucket_cap_mb: gradient megabytes per all-reduce (PyTorch DDP's default 25);
    mode: "cudagraphs" or "eager" (grove's backend); device: grove's device
    (default: the module's cuda device, else "sim"); broadcast_buffers: as
    PyTorch's DDP, rank 0's buffers are copied to every rank before each
    forward; device_ids and output_device: as PyTorch's DDP's, may name the
    module's one device."""

    # grove.training.compile_step recognises the wrapper by this mark, not by
    # importing this module (ddp imports training: the package has no import
    # cycle, ImportCyclesTest).
    grove_data_parallel = True

    def __init__(self, module, bucket_cap_mb=25, mode="cudagraphs", device=None,
                 broadcast_buffers=True, device_ids=None, output_device=None):
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("grove.torch.DistributedDataParallel: call "
                               "torch.distributed.init_process_group first (torchrun sets "
                               "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)")
        _check_device_ids(module, device_ids, output_device)
        if bucket_cap_mb <= 0:
            raise ValueError("grove.torch.DistributedDataParallel: bucket_cap_mb must be "
                             "positive, found %r" % (bucket_cap_mb,))
        self.module = module
        self.grove_device = _grove_device(module, device)
        self.broadcast_buffers = broadcast_buffers
        # As PyTorch's DDP, the buffers are listed once: walking the module
        # tree on every forward is host time each step pays.
        self._buffers_to_broadcast = list(module.buffers()) if broadcast_buffers else []
        join_group(self.grove_device)
        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor, src=0)
        self._options = {"op": "mean", "bucket_bytes": max(1, int(bucket_cap_mb * (1 << 20)))}
        self._compilers = []  # grove.training.StepCompiler of each compiled graph
        # Not a submodule: parameters() and state_dict() name the module's once.
        self.__dict__["_compiled"] = self._compile(module, mode, device)

    def _compile(self, module, mode, device):
        if torch.__version__.startswith("1."):
            from grove import training

            with gradient_reduce.active(self._options):
                compiled = training.compile_module(module, mode=mode, device=device)
            self._compilers.append(compiled.compiler)
            return compiled
        from grove import dynamo_backend as grove_torch

        options = self._options
        compilers = self._compilers
        made = gradient_reduce.made_compilers

        def backend(gm, example_inputs):
            # The StepCompiler grove's backend makes here reduces gradients.
            with gradient_reduce.active(options), made(compilers):
                return grove_torch.grove_backend(gm, example_inputs, mode=mode, device=device)

        return torch.compile(module, backend=backend, dynamic=False)

    def gradient_reduction(self):
        """(gradients reduced inside grove's backward graphs, gradients left to
        torch.distributed) over the backward graphs compiled so far."""
        in_grove = left = 0
        for compiler in self._compilers:
            for reduction in compiler.reductions:
                in_grove += len(reduction.reduced_in_grove)
                left += len(reduction.left_to_torch())
        return in_grove, left

    def no_sync(self):
        raise NotImplementedError(
            "grove.torch.DistributedDataParallel has no no_sync(): its all-reduces are part "
            "of grove's backward graph, so every backward reduces. For gradient accumulation "
            "use torch.nn.parallel.DistributedDataParallel around "
            "torch.compile(backend=\"grove\") (PyTorch 2.x) or "
            "grove.training.compile_module (1.13)")

    def forward(self, *args, **kwargs):
        if self._buffers_to_broadcast and torch.is_grad_enabled():
            with torch.no_grad():
                for buffer in self._buffers_to_broadcast:
                    dist.broadcast(buffer, src=0)
        return self._compiled(*args, **kwargs)
