"""One training step of several (model call, optimizer) pairs on the same
batch, for tests that train grove's door and eager PyTorch side by side."""


def step_in_lockstep(calls, optimizers, loss_of):
    """For each pair: zero the gradients, loss_of(call), backward, step; the
    losses, detached, in the pairs' order."""
    losses = []
    for call, optimizer in zip(calls, optimizers):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(call)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses
