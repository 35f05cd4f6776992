"""`check_crdt`: the property test every CRDT type here must pass (needs hypothesis).

Like trio's `check_two_way_stream`, this lives in the package so any layer that defines a
lattice runs the same checks on it: describe the type with a `CRDTSpec` and call
`check_crdt(spec)` from a test. Hypothesis draws random executions: 2 to 4 replicas apply
random delta mutations and now and then merge another replica's full state (so updates are
concurrent *and* causally related). Then it checks:

- merge is commutative, associative and idempotent on the states and deltas produced;
- a mutation's delta is already contained in the state it came from;
- all deltas, joined into an empty state in any order and with duplicates, give exactly the join
  of all replicas' full states (what delta-based replication relies on);
- every state and delta survives the wire: msgpack, strict decode, equal value, same bytes;
- mutated bytes either decode or raise a `ProtocolError`, never anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.packing import unpack

from .lattice import Lattice
from .wire import Wire

S = TypeVar("S", bound=Lattice)
Operation = Callable[[S, str], S]  # (replica state, replica name) -> delta, applied in place


@dataclass(frozen=True, slots=True, kw_only=True)
class CRDTSpec(Generic[S]):
    """How to test one CRDT type: an empty state, random operations, and its strict reader."""

    name: str
    empty: Callable[[], S]
    operation: st.SearchStrategy[Operation[S]]
    decode: Callable[[Wire], S]


def check_crdt(spec: CRDTSpec[S], *, max_examples: int = 150) -> None:
    """Run the lattice laws and delta-convergence property on `spec`; AssertionError if broken."""

    @settings(
        max_examples=max_examples,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def laws(data: st.DataObject) -> None:
        states, deltas = _random_execution(spec, data)
        values = states + deltas
        a, b, c = (data.draw(st.sampled_from(values), label=x) for x in "abc")
        assert a.join(b) == b.join(a), f"{spec.name}: merge is not commutative"
        assert a.join(b).join(c) == a.join(b.join(c)), f"{spec.name}: merge is not associative"
        assert a.join(a) == a, f"{spec.name}: merge is not idempotent"
        _check_delta_convergence(spec, data, states, deltas)
        for value in data.draw(st.lists(st.sampled_from(values), max_size=4), label="wire"):
            _check_wire(spec, value, data)

    laws()


def _random_execution(spec: CRDTSpec[S], data: st.DataObject) -> tuple[list[S], list[S]]:
    count = data.draw(st.integers(2, 4), label="replicas")
    states = [spec.empty() for _ in range(count)]
    deltas: list[S] = []
    for _ in range(data.draw(st.integers(1, 30), label="steps")):
        i = data.draw(st.integers(0, count - 1), label="replica")
        if data.draw(st.integers(0, 4), label="kind") == 0:
            states[i].merge(states[data.draw(st.integers(0, count - 1), label="from")].copy())
            continue
        operation = data.draw(spec.operation, label="operation")
        delta = operation(states[i], f"r{i}")
        assert delta.leq(states[i]), f"{spec.name}: a delta is not contained in its own state"
        deltas.append(delta.copy())
    return states, deltas


def _check_delta_convergence(
    spec: CRDTSpec[S], data: st.DataObject, states: list[S], deltas: list[S]
) -> None:
    full = spec.empty()
    for state in states:
        full.merge(state)
    shuffled = data.draw(st.permutations(deltas), label="delivery order")
    extra = []
    if deltas:
        extra = data.draw(st.lists(st.sampled_from(deltas), max_size=len(deltas)), label="dups")
    delivery = list(shuffled)
    for dup in extra:
        delivery.insert(data.draw(st.integers(0, len(delivery)), label="dup at"), dup)
    received = spec.empty()
    for delta in delivery:
        received.merge(delta)
    assert received == full, f"{spec.name}: deltas in another order do not give the full state"


def _check_wire(spec: CRDTSpec[S], value: S, data: st.DataObject) -> None:
    raw = value.encode()
    back = spec.decode(unpack(raw, max_size=1 << 24))
    assert back == value, f"{spec.name}: wire round trip changed the value"
    assert back.encode() == raw, f"{spec.name}: encoding is not canonical"
    mutated = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3), label="flips")):
        at = data.draw(st.integers(0, len(mutated) - 1), label="at")
        mutated[at] = data.draw(st.integers(0, 255), label="byte")
    try:
        spec.decode(unpack(bytes(mutated), max_size=1 << 24))
    except ProtocolError:
        pass
