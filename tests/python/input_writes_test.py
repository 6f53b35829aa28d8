"""Writes into a graph's inputs through the torch door (issue 33 part 2) on
sim, PyTorch 1.13: the backend function traces a graph that updates its
inputs functionalized (functorch's functionalize, as AOTAutograd does on
2.x) and the importer turns each write-back (`aten.copy_` of an input at the
end of the graph) into grove's copy_into. Updates of static inputs are
written in place inside the one program (the tree counts them as static
input writes; nothing copied back, nothing eager); updates of other inputs
are copied back by the graph tree. Every step is compared with PyTorch eager
on its own copy of the state. Note [Writes into graph inputs]."""
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove.torch  # noqa: E402
from grove import importer, input_writes  # noqa: E402
import junit_main  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
BACKENDS = ("eager", "cudagraphs")


def mark_static(tensor):
    """What torch._dynamo.mark_static_address leaves on a tensor."""
    tensor._dynamo_static_input_type = "unguarded"
    return tensor


def decode_step(cache, position, update, counter, running, x):
    """A static KV cache written at a position, a counter advanced, batch
    norm style running statistics: the three updates of issue 33 part 2."""
    cache.index_copy_(2, position, update)
    counter.add_(1)
    running.mul_(0.9).add_(x.mean(0), alpha=0.1)
    return cache.sum(-1) * counter, x + running


def decode_inputs(step, state):
    generator = torch.Generator().manual_seed(100 + step)
    return [state[0], torch.tensor([step % 8]), torch.randn(1, 2, 1, 4, generator=generator),
            state[1], state[2], torch.randn(3, 4, generator=generator)]


def fresh_state(static):
    state = [torch.zeros(1, 2, 8, 4), torch.tensor(0.0), torch.zeros(4)]
    return [mark_static(t) for t in state] if static else state


def tree_counters(graph):
    return dict(graph.runner.models()[0].stats().get("tree", {}))  # none in eager mode


def _prefill_cache(keys, counter):
    """An HF-like prefill: a static cache and its position counter made inside
    the compiled function, filled with the prompt's keys, kept by the caller."""
    cache = torch.zeros(1, 2, 8, 4)
    count = counter.clone()
    position = torch.arange(keys.shape[2]) + count
    count.add_(keys.shape[2])
    cache.index_copy_(2, position, keys)
    return cache.sum(), cache, count


def _decode_cache(cache, count, keys):
    """One decode step: the cache and counter written in place."""
    position = torch.arange(1) + count
    count.add_(1)
    cache.index_copy_(2, position, keys)
    return cache.sum(-1)


class InputWritesTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(20261126)

    def run_steps(self, static, backend, steps=5):
        state, expected_state = fresh_state(static), fresh_state(False)
        # Verify mode checks the first calls against PyTorch eager, whose
        # reference run must not advance the state a second time.
        graph = grove.torch.compile_graph(decode_step, decode_inputs(0, state), mode=backend,
                                          verify=True)
        self.assertEqual(list(graph.unsupported), [], "the writes split the graph")
        self.assertEqual([kind for kind, _ in graph.runner.steps], ["grove"])
        before = tree_counters(graph)
        for step in range(steps):
            expected = decode_step(*decode_inputs(step, expected_state))
            results = graph(*decode_inputs(step, state))
            for index, (actual, wanted) in enumerate(zip(results, expected)):
                torch.testing.assert_close(actual, wanted, rtol=RTOL, atol=ATOL, msg=lambda m: (
                    "%s step %d output %d: %s" % (backend, step, index, m)))
            for index, (actual, wanted) in enumerate(zip(state, expected_state)):
                torch.testing.assert_close(actual, wanted, rtol=RTOL, atol=ATOL, msg=lambda m: (
                    "%s step %d state %d: %s" % (backend, step, index, m)))
        after = tree_counters(graph)
        return {key: after[key] - (before.get(key) or 0) for key in after
                if isinstance(after[key], int)}

    def test_updates_of_static_inputs_are_written_inside_the_graph(self):
        for backend in BACKENDS:
            counts = self.run_steps(static=True, backend=backend)
            if backend == "cudagraphs":
                self.assertGreaterEqual(counts["replays"], 3, counts)
                self.assertEqual(counts["eager_calls"], 0, counts)
                self.assertEqual(counts["copy_back_inputs"], 0, counts)
                self.assertEqual(counts["input_copy_backs"], 0, counts)
                # The cache, the counter and the running statistics.
                self.assertEqual(counts["static_input_writes"], 3, counts)

    def test_updates_of_other_inputs_are_copied_back(self):
        for backend in BACKENDS:
            counts = self.run_steps(static=False, backend=backend)
            if backend == "cudagraphs":
                self.assertEqual(counts["eager_calls"], 0, counts)
                self.assertEqual(counts["copy_back_inputs"], 3, counts)
                # After the recording; sim's replays then write the caller's
                # tensors directly (zero-copy), a GPU's copy back after each.
                self.assertGreaterEqual(counts["input_copy_backs"], 3, counts)
                self.assertEqual(counts["static_input_writes"], 0, counts)

    def test_writes_through_views_of_an_input(self):
        # Functionalized, `cache[:, 2:4] = v` is a slice_scatter and
        # `cache[1] = row` a select_scatter of the cache, then one write-back.
        def write_rows(cache, v, row):
            cache[:, 2:4] = v
            cache[1] = row
            return cache * 2

        for backend in BACKENDS:
            cache = mark_static(torch.randn(3, 6))
            expected_cache = cache.clone()
            graph = grove.torch.compile_graph(write_rows, [cache, torch.randn(3, 2),
                                                           torch.randn(6)], mode=backend)
            self.assertEqual(list(graph.unsupported), [])
            for _ in range(3):
                v, row = torch.randn(3, 2), torch.randn(6)
                expected = write_rows(expected_cache, v, row)
                torch.testing.assert_close(graph(cache, v, row), expected)
                torch.testing.assert_close(cache, expected_cache)

    def test_writes_through_partial_views_of_intermediates_are_functionalized(self):
        # Note [Writes through views are functionalized]: DeepSeek-V3 assembles
        # its query by copy_ into two slices of a new_empty; a row written with
        # x[1] = v and a slice updated in place (add_) are the same pattern.
        # Left alone, each write and every value in its storage ran in PyTorch.
        def assemble(x, w):
            q = x.new_empty(x.shape[0], 9)
            q[:, :4] = x[:, :4] * 2
            q[:, 4:] = torch.tanh(x[:, 4:])
            h = x @ w
            h[1] = h[0] * 3
            h[:, 2:5].add_(1.5)
            return q + h

        for backend in BACKENDS:
            x, w = torch.randn(3, 9), torch.randn(9, 9)
            graph = grove.torch.compile_graph(assemble, [x, w], mode=backend)
            self.assertEqual(list(graph.unsupported), [])
            for _ in range(3):
                x = torch.randn(3, 9)
                torch.testing.assert_close(graph(x, w), assemble(x, w), rtol=RTOL, atol=ATOL)

    def test_a_new_value_read_from_other_positions_of_the_input(self):
        # The written value reads the input elsewhere (a flip, a shift by a
        # row): the write must not overwrite positions still to be read
        # (sim runs a kernel's elements in order, so an in-kernel hazard
        # shows here).
        def flipped(x, y):
            x.copy_(x.flip(0) + y)
            return x.sum(0)

        def shifted(x, y):
            x[1:] = x[:-1] * y
            return x.sum(0)

        for function in (flipped, shifted):
            for backend in BACKENDS:
                x = mark_static(torch.randn(64, 4))
                expected_x, y = x.clone(), torch.rand(4) + 0.5
                graph = grove.torch.compile_graph(function, [x, y], mode=backend)
                self.assertEqual(list(graph.unsupported), [])
                for step in range(3):
                    expected = function(expected_x, y)
                    torch.testing.assert_close(graph(x, y), expected, rtol=RTOL, atol=ATOL)
                    torch.testing.assert_close(x, expected_x, msg=lambda m: "%s %s step %d: %s"
                                               % (function.__name__, backend, step, m))

    def test_a_graph_ending_in_write_backs_as_dynamo_emits_it(self):
        # What AOTAutograd hands a backend on PyTorch 2.x: the update computed
        # out of place, `copy_` of the input last (built here by hand).
        graph = torch.fx.Graph()
        buffer, x = graph.placeholder("buffer"), graph.placeholder("x")
        new = graph.call_function(torch.ops.aten.add.Tensor, (buffer, x))
        out = graph.call_function(torch.ops.aten.mul.Tensor, (new, 2.0))
        graph.call_function(torch.ops.aten.copy_.default, (buffer, new))
        graph.output((out,))
        module = torch.fx.GraphModule(torch.nn.Module(), graph)
        for backend in BACKENDS:
            state, x_value = torch.randn(6), torch.randn(6)
            expected_state = state.clone()
            plan = importer.import_graph(module, [state, x_value], static_inputs=[0])
            self.assertEqual(plan.unsupported, [])
            self.assertEqual(len(input_writes.write_backs(module.graph)), 1)
            runner = plan.compile(backend=backend)
            for _ in range(3):
                expected_state += x_value
                (result,) = runner(state, x_value)
                torch.testing.assert_close(result, expected_state * 2)
                torch.testing.assert_close(state, expected_state)

    def test_a_write_back_read_afterwards_stays_in_pytorch(self):
        graph = torch.fx.Graph()
        buffer, x = graph.placeholder("buffer"), graph.placeholder("x")
        new = graph.call_function(torch.ops.aten.add.Tensor, (buffer, x))
        graph.call_function(torch.ops.aten.copy_.default, (buffer, new))
        out = graph.call_function(torch.ops.aten.mul.Tensor, (buffer, 2.0))
        graph.output((out,))
        module = torch.fx.GraphModule(torch.nn.Module(), graph)
        self.assertEqual(input_writes.write_backs(module.graph), set())
        state, x_value = torch.randn(6), torch.randn(6)
        expected = (state + x_value) * 2
        plan = importer.import_graph(module, [state, x_value], static_inputs=[0])
        self.assertIn("aten.copy_", [op for _, op, _ in plan.unsupported])
        (result,) = plan.compile(backend="eager")(state, x_value)
        torch.testing.assert_close(result, expected)

    def test_batch_norm_running_statistics_in_training_mode(self):
        def normalize(x, weight, bias, mean, var):
            return F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.1)

        for backend in BACKENDS:
            mean, var = mark_static(torch.zeros(5)), mark_static(torch.ones(5))
            expected_mean, expected_var = torch.zeros(5), torch.ones(5)
            weight, bias = torch.nn.Parameter(torch.rand(5)), torch.nn.Parameter(torch.randn(5))
            x = torch.randn(8, 5, 3)
            graph = grove.torch.compile_graph(normalize, [x, weight, bias, mean, var],
                                              mode=backend)
            for step in range(3):
                x = torch.randn(8, 5, 3)
                with torch.no_grad():
                    expected = normalize(x, weight, bias, expected_mean, expected_var)
                result = graph(x, weight, bias, mean, var)
                torch.testing.assert_close(result, expected, rtol=RTOL, atol=ATOL)
                torch.testing.assert_close(mean, expected_mean, rtol=RTOL, atol=ATOL)
                torch.testing.assert_close(var, expected_var, rtol=RTOL, atol=ATOL)

    def test_state_made_inside_the_graph_leaves_the_pool(self):
        # HF's static cache on its first (prefill) call: the cache is made and
        # filled inside the compiled forward and kept by the caller, then
        # written in place by every later (decode) call, each a generation of
        # its own. Note [State outputs leave the pool].
        prefill, decode = _prefill_cache, _decode_cache
        prompt, counter = torch.randn(1, 2, 3, 4), torch.tensor([0])
        for backend in BACKENDS:
            first = grove.torch.compile_graph(prefill, [prompt, counter], mode=backend)
            _, cache, count = first(prompt, counter)
            second = grove.torch.compile_graph(decode, [cache.clone(), count.clone(),
                                                        torch.randn(1, 2, 1, 4)], mode=backend)
            for sequence in range(2):  # the second replays the recorded graphs
                _, cache, count = first(prompt, counter)
                expected_cache, expected_count = prefill(prompt, counter)[1:]
                for step in range(4):
                    keys = torch.randn(1, 2, 1, 4)
                    expected = decode(expected_cache, expected_count, keys)
                    result = second(cache, count, keys)
                    torch.testing.assert_close(result, expected, msg=lambda m: (
                        "%s sequence %d step %d: %s" % (backend, sequence, step, m)))
                    torch.testing.assert_close(cache, expected_cache)
                    self.assertEqual(count.item(), expected_count.item())
            self.assertEqual(list(first.unsupported), [])
            self.assertEqual(list(second.unsupported), [])

    def test_reused_state_keeps_its_address(self):
        # Note [Reused state copies] (runner.py): HF's generate makes a new
        # static cache per sequence inside the compiled prefill. With
        # reuse_state the prefill hands back the same memory every sequence,
        # so the decode graph that bound it (a static input, as dynamo marks
        # the copy) is never demoted, records nothing after the first
        # sequence and copies no cache in or back; without it the first new
        # cache demotes it (Note [Static inputs that move]). Outputs and
        # caches equal eager PyTorch's either way.
        prefill, decode = _prefill_cache, _decode_cache
        def marked_static(tensor):
            tensor._dynamo_static_input_type = "unguarded"  # mark_static_address's mark
            return tensor

        generator = torch.Generator().manual_seed(7)
        counter = torch.tensor([0])
        for reuse in (False, True):
            first = grove.torch.compile_graph(prefill, [torch.randn(1, 2, 3, 4), counter],
                                              reuse_state=reuse)
            second = None
            addresses, recorded = set(), []
            held = []  # every sequence's cache stays alive: no address is freed and reused
            for sequence in range(5):
                prompt = torch.randn(1, 2, 3, 4, generator=generator)
                _, cache, count = first(prompt, counter)
                cache, count = marked_static(cache), marked_static(count)
                held.append(cache)
                addresses.add(cache.data_ptr())
                if second is None:
                    second = grove.torch.compile_graph(
                        decode, [cache, count, torch.randn(1, 2, 1, 4)])
                    self.assertEqual(second.runner.static_positions, [0, 1])
                expected_cache, expected_count = prefill(prompt, counter)[1:]
                torch.testing.assert_close(cache, expected_cache)
                for step in range(4):
                    keys = torch.randn(1, 2, 1, 4, generator=generator)
                    expected = decode(expected_cache, expected_count, keys)
                    with torch.no_grad():
                        result = second(cache, count, keys)
                    message = "reuse %s sequence %d step %d" % (reuse, sequence, step)
                    torch.testing.assert_close(result, expected, msg=message)
                    torch.testing.assert_close(cache, expected_cache, msg=message)
                    self.assertEqual(count.item(), expected_count.item(), message)
                recorded.append(dict(second.runner.models()[0].stats()["tree"]))
            tree = recorded[-1]
            later = {key: tree[key] - recorded[1][key] for key in (
                "recordings", "input_copies", "input_copy_backs", "static_input_writes",
                "eager_calls", "replays")}
            self.assertEqual(later["recordings"], 0, (reuse, tree))
            self.assertEqual(later["eager_calls"], 0, (reuse, tree))
            # The tree's counters cover both graphs: a prefill and four steps.
            self.assertEqual(later["replays"], 3 * 5, (reuse, tree))
            if reuse:
                # One address for every sequence's cache: the decode graph keeps
                # it bound and writes it in place (mutation type (b)), never
                # copying it in or back.
                self.assertEqual(len(addresses), 1)
                self.assertEqual(second.rebuilds, 0)
                self.assertEqual(second.runner.static_positions, [0, 1])
                self.assertEqual(tree["copy_back_inputs"], 0, tree)
                self.assertEqual(later["input_copies"], 0, tree)
                self.assertEqual(later["input_copy_backs"], 0, tree)
                self.assertGreater(tree["static_input_writes"], 0, tree)
            else:
                self.assertEqual(len(addresses), 5)
                self.assertEqual(second.rebuilds, 1)
                self.assertEqual(second.demoted, {0, 1})

    def test_a_functional_trace_that_draws_otherwise_is_not_used(self):
        # Note [Functionalized draws checked against the plain trace]: a
        # functionalizer whose graph draws other numbers (here one draw more
        # before the function, as PyTorch 2.11's rewrite of dropout's
        # operand does in effect) is caught by running both traces, and the
        # plain one stays: grove equals eager under the seed. A graph whose
        # draws agree keeps its functional trace.
        def noisy_update(x, state):
            state.mul_(0.5).add_(x.mean(0))
            return F.dropout(x * state, 0.3, training=True)

        def unread_draw_update(x, state):
            state.mul_(0.5).add_(x.mean(0))
            return x * state

        real = input_writes._functionalize()

        def shifted(function):
            def run(*args):
                torch.rand(())  # every later draw takes other numbers
                return real(function)(*args)
            return run

        x, state = torch.randn(8, 16), torch.randn(16)
        original = input_writes._functionalize
        input_writes._functionalize = lambda: shifted
        try:
            graph, _ = input_writes.aten_graph(noisy_update, [x, state])
            quiet, _ = input_writes.aten_graph(unread_draw_update, [x, state])
        finally:
            input_writes._functionalize = original
        self.assertIn("aten.add_.Tensor", graph.code)  # the plain trace
        self.assertNotIn("aten.add_.Tensor", quiet.code)  # the functional one
        plan = importer.import_graph(graph, [x, state.clone()], name="noisy")
        runner = plan.compile(backend="eager", device="sim")
        for call in range(3):
            mine, theirs = state.clone(), state.clone()
            torch.manual_seed(40 + call)
            expected = noisy_update(x, theirs)
            torch.manual_seed(40 + call)
            result = runner(x, mine)
            torch.testing.assert_close(result, expected, msg="call %d" % call)
            torch.testing.assert_close(mine, theirs, msg="call %d" % call)

    def test_tracing_leaves_the_random_state_alone(self):
        def noisy_update(x, state):
            state.add_(1.0)
            return F.dropout(x, 0.3, training=True) + torch.rand(x.shape)

        inputs = [torch.randn(4, 8), torch.randn(8)]
        torch.manual_seed(5)
        before = torch.get_rng_state()
        input_writes.aten_graph(noisy_update, inputs)  # two traces and their check
        self.assertTrue(torch.equal(torch.get_rng_state(), before))


class InputAliasesTest(unittest.TestCase):
    """Note [Outputs that alias inputs] (grove/input_aliases.py)."""

    def _check(self, function, make_inputs, traces):
        for trace in traces:
            for backend in BACKENDS:
                inputs = make_inputs()
                if trace == "plain":
                    from torch.fx.experimental.proxy_tensor import make_fx

                    with torch.no_grad():
                        graph = make_fx(function)(*input_writes.trace_clones(inputs))
                    plan = importer.import_graph(graph, inputs, name="aliases")
                    compiled = plan.compile(backend=backend, device="sim", input_aliases=True)
                else:
                    with torch.no_grad():
                        compiled = grove.torch.compile_graph(function, inputs, mode=backend)
                for call in range(3):
                    mine = make_inputs()
                    theirs = [value.clone() for value in mine]
                    with torch.no_grad():
                        got, expected = compiled(*mine), function(*theirs)
                    label = "%s trace, %s, call %d" % (trace, backend, call)
                    for value, want in zip(got, expected):
                        torch.testing.assert_close(value, want, msg=label)
                        # Written through, the output changes the input alike.
                        value.mul_(-3.0)
                        want.mul_(-3.0)
                    for value, want in zip(mine, theirs):
                        torch.testing.assert_close(value, want, msg=label)
                    if expected[0] is theirs[0]:  # the input itself comes back
                        self.assertIs(got[0], mine[0], label)

    def test_views_of_an_updated_input(self):
        def function(x, y):
            x.add_(y)
            return x[1:], (x * 2).t(), x.t()

        self._check(function, lambda: [torch.randn(6, 5), torch.randn(6, 5)],
                    ("plain", "functional"))

    def test_an_updated_input_returned_is_the_input(self):
        def function(x):
            x.mul_(2.0)
            return x, x + 1

        self._check(function, lambda: [torch.randn(4, 3)], ("plain", "functional"))

    def test_views_of_an_input_the_graph_only_reads(self):
        def function(x):
            return x.view(2, 6), x.sum(0), x.unsqueeze(0)

        self._check(function, lambda: [torch.randn(4, 3)], ("plain",))


if __name__ == "__main__":
    junit_main.main()
