"""peertrain.crdt: the run's shared state as signed delta-state CRDTs, and its replication.

Bottom up:

    hlc.py         hybrid logical clock stamps (wall ms, counter, writer)
    wire.py        canonical msgpack forms, strict readers, value codecs
    lattice.py     the CRDT contract: merge / copy / to_wire, join, leq
    lww.py lwwmap.py counters.py dots.py orset.py
                   LWW register and map, G- and PN-counters, add-wins OR-set (windowed)
    conformance.py check_crdt: the property test every lattice passes (needs hypothesis)
    records.py     member records, checkpoint references, ban votes (capped sizes)
    rundoc.py      RunDoc: the composed document, deltas and state alike
    manifest.py    the signed, self-naming run manifest (run ID = its hash)
    runstate.py    RunState: ownership checks, leases, garbage collection, views, digests
    writer.py      RunWriter: this peer's own writes, each returning a delta
    signed.py      signed deltas and snapshots (protocol envelopes)
    proofs.py      ProofStore: the signed envelopes kept to forward to others
    sync.py        anti-entropy messages;  transport.py: the two interfaces replication needs
    intake.py      Intake: every received envelope deduplicated, checked, applied or penalised
    replicator.py  Replicator: paced gossip + push-pull anti-entropy
(in-memory transport and a swarm of replicators for tests: peertrain.testing.memory_router,
crdt_network)
"""
