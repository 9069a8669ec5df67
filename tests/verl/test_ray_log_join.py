"""Joining the lines Ray forwards from its actors (``skillduet_testing.verl_cpu_run.joined_ray_log``), which the
verl fit tests read verl's printed config from: no verl run needed."""

from __future__ import annotations

from skillduet_testing.verl_cpu_run import joined_ray_log

PRINTED = "{'opd_coef': 0.25, 'gate_beta': 5.0}"


def test_a_line_split_inside_a_token_is_whole_again():
    log = ("starting\n(TaskRunner pid=4711) {'opd_coef': 0.25, 'gate_b\n"
           "(TaskRunner pid=4711) eta': 5.0}\n")
    assert PRINTED in joined_ray_log(log)


def test_a_line_split_at_a_space_keeps_one_space():
    for first, second in (("{'opd_coef':", "  0.25, 'gate_beta': 5.0}"), ("{'opd_coef': ", " 0.25, 'gate_beta': 5.0}")):
        log = f"\x1b[36m(TaskRunner pid=4711)\x1b[0m {first}\n\x1b[36m(TaskRunner pid=4711)\x1b[0m{second}\n"
        assert PRINTED in joined_ray_log(log)


def test_lines_of_another_node_and_of_pprint_read_as_one_text():
    log = ("(TaskRunner pid=9, ip=10.0.0.2) {'skillduet': {'opd_coef': 0.25,\n"
           "(TaskRunner pid=9, ip=10.0.0.2)                'gate_beta': 5.0}}\n")
    assert joined_ray_log(log) == "{'skillduet': " + PRINTED + "} "
