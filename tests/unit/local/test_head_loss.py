from rayfleet.local.head_loss import next_head_name


def test_a_replacement_head_is_numbered_after_the_heads_before_it_not_their_fork_servers(tmp_path):
    for log in ("head.log", "head-warm.log", "worker-1.log", "worker-1-warm.log"):
        (tmp_path / log).touch()
    assert next_head_name(tmp_path) == "head-2"
    (tmp_path / "head-2.log").touch()
    (tmp_path / "head-2-warm.log").touch()
    assert next_head_name(tmp_path) == "head-3"
