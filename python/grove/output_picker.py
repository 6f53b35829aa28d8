"""A graph's outputs gathered from a call's pieces (its results, its
arguments passed through, constants) with no Python per output: the
door's per-stage host path (issue 34) for GraphRunner's fast plan and the
kept forward and backward of handoff.py.
"""

import operator


class OutputPicker:
    """A graph's outputs from a call's pieces with no Python per output:
    each output is ("result", i) (the i-th of the call's results, of which
    there are `result_count`), ("argument", i) (the call's argument i,
    passed through) or ("value", v) (a constant: a folded value, None). The
    pieces are joined into one list (results, constants, arguments) and one
    itemgetter takes the outputs from it; `container` is the outputs' type
    (tuple, list) or None for a graph returning one value."""

    def __init__(self, sources, result_count, container, fresh=()):
        """fresh: for each ("value", v) source in order, whether each call
        hands out a copy of v (Note [Constant outputs are handed out fresh],
        runner.py)."""
        constants = [value for kind, value in sources if kind == "value"]
        self.constants = constants
        self.fresh = [index for index, copied in enumerate(fresh) if copied]
        self.uses_arguments = any(kind == "argument" for kind, _ in sources)
        self.result_count = result_count
        indices, constant = [], 0
        for kind, value in sources:
            if kind == "result":
                indices.append(value)
            elif kind == "value":
                indices.append(result_count + constant)
                constant += 1
            else:
                indices.append(result_count + len(constants) + value)
        self.container = container
        self.whole = (indices == list(range(result_count)) and container is not None)
        if container is None:
            index = indices[0]
            self.pick = lambda joined: joined[index]
        elif len(indices) > 1:
            getter = operator.itemgetter(*indices)
            self.pick = lambda joined: container(getter(joined))
        else:
            self.pick = lambda joined: container([joined[index] for index in indices])

    def __call__(self, results, args):
        if len(results) != self.result_count:
            raise RuntimeError("grove: a graph call produced %d results where its plan has %d "
                               "(report it)" % (len(results), self.result_count))
        if self.whole:
            return results if self.container is list else self.container(results)
        joined = results
        if self.constants:
            constants = self.constants
            if self.fresh:
                constants = list(constants)
                for index in self.fresh:
                    constants[index] = constants[index].clone()
            joined = joined + constants
        if self.uses_arguments:
            joined = joined + list(args)
        return self.pick(joined)

