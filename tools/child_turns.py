"""Children that prepare side by side and then run one at a time
(Note [Children that take turns], benchmarks/torch_zoo.py, its one user):
take_turns in the parent, wait_for_turn in each child.
"""
import os
import tempfile
import time

import bounded_child

READY_LIMIT_S = 60.0  # the most a child may take to prepare

# The protocol and why: Note [Children that take turns] (benchmarks/torch_zoo.py,
# its one user). Test: tests/tools/child_turns_test.sh.


class Turn:
    """What take_turns saw of one case: case (as given), done
    (bounded_child.Finished, or None where it never ran), json_path (the
    path the child was told to write), ready_s (seconds from the start until
    it was ready; None if never), run_s (seconds from its go until it
    ended; None where it never ran), limit_s, and stopped (why it never ran,
    or None)."""

    def __init__(self, case, json_path):
        self.case = case
        self.json_path = json_path
        self.done = None
        self.ready_s = None
        self.run_s = None
        self.limit_s = None
        self.stopped = None


def take_turns(cases, deadline, limit_s, command_of, on_turn, min_limit_s=0.0,
               ready_limit_s=READY_LIMIT_S):
    """Runs `cases` (in order) as children started at once that each run
    when told (Note [Children that take turns]). command_of(case, json path,
    turn folder) -> the child's command (a list); on_turn(Turn) after each
    case (the folder holding json_path is removed when take_turns returns:
    read it there). A case runs for at most limit_s seconds, and not past
    `deadline` (time.time()) unless min_limit_s is larger than what is left.
    Returns the Turns."""
    turns = []
    children = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            _run_turns(cases, deadline, limit_s, command_of, on_turn, min_limit_s,
                       ready_limit_s, folder, children, turns)
    finally:
        # Stopped from outside (SIGTERM made SystemExit, KeyboardInterrupt)
        # or failed: no child outlives the parent (each leads its own group).
        for _, _, child in children:
            if child.running():
                child.stop()
    return turns


def _run_turns(cases, deadline, limit_s, command_of, on_turn, min_limit_s, ready_limit_s, folder,
               children, turns):
    """take_turns' work; `children` and `turns` are filled as they start."""
    for index, case in enumerate(cases):
        turn_folder = os.path.join(folder, "case%d" % index)
        os.makedirs(turn_folder)
        turn = Turn(case, os.path.join(turn_folder, "case.json"))
        command = command_of(case, turn.json_path, turn_folder)
        children.append((turn, turn_folder, bounded_child.start(command)))
        turns.append(turn)
    started = time.monotonic()
    ready_end = started + max(0.0, min(ready_limit_s, deadline - time.time()))
    waiting = list(children)
    while waiting and time.monotonic() < ready_end:
        for entry in list(waiting):
            turn, turn_folder, child = entry
            if os.path.exists(os.path.join(turn_folder, "ready")) or not child.running():
                turn.ready_s = round(time.monotonic() - started, 2)
                waiting.remove(entry)
        time.sleep(0.02)
    for turn, turn_folder, child in children:
        left = deadline - time.time()
        if left <= 0 and child.running():
            turn.done = child.stop()
            turn.stopped = "not run: the time budget was spent"
        elif turn.ready_s is None and child.running():
            turn.done = child.stop()
            turn.stopped = "not ready (imports, CUDA) within %.0f s: stopped" % ready_limit_s
        else:
            turn.limit_s = min(limit_s, max(left, min_limit_s))
            go = time.monotonic()
            with open(os.path.join(turn_folder, "go"), "w"):
                pass
            turn.done = child.wait(turn.limit_s)
            turn.run_s = round(time.monotonic() - go, 2)
        on_turn(turn)


def wait_for_turn(folder):
    """In a child: says it is ready, then sleeps until told to go (Note
    [Children that take turns])."""
    with open(os.path.join(folder, "ready.part"), "w"):
        pass
    os.replace(os.path.join(folder, "ready.part"), os.path.join(folder, "ready"))
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.01)
