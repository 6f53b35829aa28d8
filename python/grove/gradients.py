"""Gradients a graph backend hands to autograd out of its pool, and their copy
before the pool's memory is reused (Note [Gradients handed out of the pool]).
"""

import itertools
import operator
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
# TrainingTest.test_gradients_outlive_the_compiled_module. A backward notes
# its whole set of gradients as one entry, and the check of a set whose
# parameters' .grad are all None (zero_grad's default) is one pass in C
# (map over the set), so neither side runs Python per gradient in the usual
# loop; GradientSetTest in tests/python/handout_test.py covers the set form.
_handed_gradients = []  # (weak references to parameters, data pointers of their gradients)

_dereference = weakref.ref.__call__


def hand_out_gradient(parameter, gradient):
    """Notes that `gradient`, pool memory of a graph backend, becomes
    `parameter`'s .grad (Note [Gradients handed out of the pool])."""
    _handed_gradients.append(((weakref.ref(parameter),), (gradient.data_ptr(),)))


def hand_out_gradients(parameter_references, pointers):
    """hand_out_gradient for a backward's set at once: the gradient at
    pointers[i] becomes the .grad of parameter_references[i]() (a weak
    reference); both sequences are kept as given, not copied."""
    _handed_gradients.append((parameter_references, pointers))


# Note [Tensors are never counted against None]: whether a set of .grad
# values holds any tensor is asked by identity (a C-level map of
# operator.is_not), never by list.count(None) or ==: those compare each
# tensor with None through Tensor.__eq__, which raises and catches a
# TypeError inside PyTorch (about 12 us a tensor on PyTorch 1.13 here: 110 us
# for 9 gradients), and a .grad kept from the last step (1.13's
# zero_grad(set_to_none=False), gradient accumulation) made every forward pay
# it. Same answers. Test:
# GradientSetTest.test_held_gradients_are_never_compared_with_none
# (tests/python/handout_test.py).
def keep_handed_gradients():
    """Copies every handed-out gradient still held as .grad into memory of its own."""
    handed = list(_handed_gradients)
    del _handed_gradients[:]
    for references, pointers in handed:
        parameters = list(map(_dereference, references))
        grads = list(map(getattr, parameters, _REPEAT("grad"), _REPEAT(None)))
        # Note [Tensors are never counted against None]
        if not any(map(operator.is_not, grads, _REPEAT(None))):
            continue
        for parameter, grad, pointer in zip(parameters, grads, pointers):
            if grad is not None and grad.data_ptr() == pointer:
                parameter.grad = grad.clone()


_REPEAT = itertools.repeat  # unbounded: each map stops with its sequence
