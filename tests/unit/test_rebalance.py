"""Which runners move when a node joins: rlpar.sampling.distributed.plan_moves."""

from rlpar.sampling.distributed import plan_moves



def per_node(placed, moves, hosts):
    after = {**placed, **dict(moves)}
    return {h: sum(1 for n in after.values() if n == h) for h in hosts}


def test_a_node_back_after_a_loss_gets_its_share_from_the_fullest_nodes():
    # 24 runners on 6 nodes; node f was lost, its 4 runners restarted on a-d; f is back.
    placed = {w: "abcdef"[w // 4] for w in range(24)}
    for w in range(20, 24):
        placed[w] = "abcd"[w - 20]
    moves = plan_moves(placed, list("abcdef"))
    assert per_node(placed, moves, "abcdef") == dict.fromkeys("abcdef", 4)
    assert len(moves) == 4 and {node for _, node in moves} == {"f"}
    assert {placed[w] for w, _ in moves} == set("abcd")  # one from each node that had 5


def test_balanced_or_nearly_balanced_pools_stay_put():
    assert plan_moves({w: "abc"[w % 3] for w in range(9)}, list("abc")) == []
    assert plan_moves({w: "abc"[w % 3] for w in range(10)}, list("abc")) == []  # 4, 3, 3
    assert plan_moves({}, list("ab")) == [] and plan_moves({0: "a"}, []) == []


def test_more_nodes_than_runners_moves_nothing_and_a_lost_host_is_no_target():
    assert plan_moves({0: "a", 1: "a"}, list("abcd")) == []  # floor share 0
    placed = {w: "a" for w in range(6)}
    moves = plan_moves(placed, ["a", "b"])  # c is gone (not a host): nothing goes there
    assert per_node(placed, moves, "ab") == {"a": 3, "b": 3}


def test_two_new_nodes_each_get_a_share():
    placed = {w: "ab"[w % 2] for w in range(8)}
    moves = plan_moves(placed, list("abcd"))
    assert per_node(placed, moves, "abcd") == dict.fromkeys("abcd", 2)


def test_a_node_gets_no_more_runners_than_its_free_cpus_hold():
    placed = {w: "a" for w in range(8)}
    moves = plan_moves(placed, ["a", "b", "c"], room={"a": 0, "b": 1, "c": 0})
    assert moves == [(7, "b")]
    assert plan_moves(placed, ["a", "b"], room={"b": 0}) == []
