"""Gradients a graph backend hands to autograd out of its pool, and their copy
before the pool's memory is reused (Note [Gradients handed out of the pool]).
"""

import weakref

# Note [Gradients handed out of the pool]: in a graph backend, the gradients a
# training step's backward returns are its outputs in the tree's pool, handed
# to autograd uncopied (it keeps each as its parameter's .grad). They stay
# valid through the step's path (the optimizer step reads them in place), but
# the next path's replays (the next step's forward, an evaluation) reuse that
# memory. So before a forward or inference call of a graph backend, every
# parameter whose .grad is still such a gradient gets a copy of it: a loop
# that sets the gradients to None (zero_grad's default) copies nothing, and
# gradient accumulation over several forwards keeps the right sums. A
# reference to a gradient taken elsewhere (g = p.grad, then p.grad = None) is
# not followed. The same copies are made before a graph backend's model is
# destroyed: the tree releases its pool with its last model, and a .grad
# viewing it would read freed memory. Guarded by
# TrainingTest.test_gradients_land_in_grad_without_a_copy_in_cudagraphs_mode,
# TrainingTest.test_gradient_accumulation_two_forwards_one_backward_each and
# TrainingTest.test_gradients_outlive_the_compiled_module.
_handed_gradients = []  # (weak reference to a parameter, data pointer of its gradient)


def hand_out_gradient(parameter, gradient):
    """Notes that `gradient`, pool memory of a graph backend, becomes
    `parameter`'s .grad (Note [Gradients handed out of the pool])."""
    _handed_gradients.append((weakref.ref(parameter), gradient.data_ptr()))


def keep_handed_gradients():
    """Copies every handed-out gradient still held as .grad into memory of its own."""
    handed = list(_handed_gradients)
    del _handed_gradients[:]
    for reference, pointer in handed:
        parameter = reference()
        grad = None if parameter is None else parameter.grad
        if grad is not None and grad.data_ptr() == pointer:
            parameter.grad = grad.clone()
