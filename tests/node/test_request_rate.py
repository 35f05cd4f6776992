"""How often an IP block may ask for expensive work (a dial-back): IDs are free, blocks are not."""

from __future__ import annotations

from peertrain.node.net.request_rate import RequestRate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_block_is_answered_a_burst_then_one_request_per_interval():
    clock = Clock()
    rate = RequestRate(burst=2, every=10.0, clock=clock)
    assert rate.admits("81.2.69.7") and rate.admits("81.2.69.200")  # one /24, many IDs
    assert not rate.admits("81.2.69.7")
    clock.now += 10.0
    assert rate.admits("81.2.69.9") and not rate.admits("81.2.69.9")
    assert rate.refused == 2


def test_another_block_has_its_own_turns():
    rate = RequestRate(burst=1, every=60.0, clock=Clock())
    assert rate.admits("81.2.69.7") and not rate.admits("81.2.69.8")
    assert rate.admits("93.184.216.7")


def test_all_blocks_together_are_held_to_the_overall_pace():
    clock = Clock()
    rate = RequestRate(burst=4, every=1.0, overall=1.0, overall_burst=3, clock=clock)
    blocks = [f"198.51.{i}.1" for i in range(10)]  # a stranger with many blocks
    assert [rate.admits(ip) for ip in blocks] == [True] * 3 + [False] * 7
    clock.now += 1.0
    assert rate.admits(blocks[9]) and not rate.admits(blocks[8])


def test_this_machine_and_its_lan_are_not_limited():
    rate = RequestRate(burst=1, every=3600.0, overall=0.001, overall_burst=1, clock=Clock())
    assert all(rate.admits(ip) for ip in ["127.0.0.1", "10.0.0.2", "192.168.1.5"] * 20)


def test_what_is_no_ip_address_is_refused():
    assert not RequestRate().admits("not-an-address")


def test_the_table_of_blocks_stays_bounded_and_forgets_the_idlest():
    clock = Clock()
    rate = RequestRate(
        burst=1, every=3600.0, overall=1e6, overall_burst=1e6, max_blocks=4, clock=clock
    )
    assert rate.admits("81.2.69.1") and not rate.admits("81.2.69.1")
    for i in range(8):  # eight other blocks push the first out of the table
        clock.now += 1.0
        rate.admits(f"198.51.{i}.1")
    assert len(rate._blocks) == 4
    assert rate.admits("81.2.69.1")  # forgotten: a fresh burst, no more
