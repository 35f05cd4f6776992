"""Contribution scores: who does useful work in an open run, measured, not counted by ID.

    probe.py   the gain of one update on seeded held-out and own-shard batches (torch)
    copies.py  near-duplicates of this round's updates and replays of the last round's
    rating.py  gains → credit → an EMA rating; the thresholds that decide who counts
    scorer.py  one scorer's round, top to bottom

The group side (who scores, whose cards count, probation slots) is
swarm/diloco/group/scoring.py; the cards travel in the run state (crdt/scorecard.py).
"""
