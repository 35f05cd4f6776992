"""Residential Internet links for the scale simulation: where nodes sit, their access links, loss,
and how long they stay. Numbers are drawn from published measurements (rounded):

- Where: shares of Internet users by region (ITU / Internet World Stats, 2023, rounded): Asia 53%,
  Europe 14%, Africa 12%, Latin America 10%, North America 7%, Middle East 3%, Oceania 1%.
- Access latency and loss: FCC, *Measuring Broadband America, Thirteenth Fixed Broadband Report*
  (2024; data of Sep–Oct 2022): idle latency to a nearby server ≈ 10 ms on fibre, 15–30 ms on
  cable and DSL; peak-period packet loss under 0.4% for most panelists, 0.4–1% for some, over
  1% for a few. Here: access RTT lognormal, median 18 ms; loss per node 0.1% / 0.6% / 1.5%.
- Path: Singla et al., *The Internet at the Speed of Light*, HotNets 2014: minimum RTTs between
  end hosts are about 3× the great-circle speed-of-light RTT (median). Here: RTT(a, b) =
  access(a) + access(b) + 3 · 2·d(a, b)/c.
- Rates: Ookla Speedtest Global Index, fixed broadband: global median ≈ 84 Mbit/s down, 44 Mbit/s
  up (Aug 2020; ≈ 90 / 45 since). Here: lognormal, medians 85 / 40 Mbit/s, σ = 0.8.
- Churn: Stutzbach & Rejaie, *Understanding Churn in Peer-to-Peer Networks*, IMC 2006 (Kad,
  BitTorrent, Gnutella): session lengths Weibull with shape 0.34–0.59 and scale 21–42 min;
  arrivals Poisson. Here: shape 0.5, scale 40 min (mean 80 min), so 1/80 of the nodes leave per
  minute, without a goodbye, and as many join.

TCP turns loss into delay: a message that loses a packet arrives one retransmission timeout
(max(200 ms, 2 RTT)) late, and everything behind it on its stream waits (head of line).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

REGIONS = (  # (share of users, latitude, longitude) of a region's centre
    (0.53, 25.0, 100.0),  # Asia
    (0.14, 50.0, 10.0),  # Europe
    (0.12, 5.0, 20.0),  # Africa
    (0.10, -15.0, -55.0),  # Latin America
    (0.07, 40.0, -95.0),  # North America
    (0.03, 28.0, 45.0),  # Middle East
    (0.01, -30.0, 145.0),  # Oceania
)
REGION_SPREAD_DEG = 12.0  # how far from its region's centre a node may sit (one sigma)
EARTH_KM = 6371.0
LIGHT_KM_S = 299_792.0
PATH_INFLATION = 3.0  # Singla et al.: RTT ≈ 3 × the speed-of-light RTT
ACCESS_RTT_MEDIAN = 0.018
LOSS_CLASSES = ((0.70, 0.001), (0.22, 0.006), (0.08, 0.015))  # (share of nodes, loss rate)
DOWN_MEDIAN_BPS = 85e6
UP_MEDIAN_BPS = 40e6
RATE_SIGMA = 0.8
MIN_RTO = 0.2
PACKET = 1448  # TCP payload per packet
PER_PACKET = 40  # IP + TCP headers
PER_MESSAGE = 12 + 18  # a Yamux header, Noise's length prefix and tag
WEIBULL_SHAPE = 0.5
WEIBULL_SCALE_S = 40 * 60.0


@dataclass(slots=True)
class Access:
    """One node's access link and position."""

    xyz: tuple[float, float, float]  # unit vector of its place on Earth
    rtt: float  # access round trip, seconds
    loss: float  # packet loss rate
    up: float  # bytes per second
    down: float
    up_free: float = 0.0  # when the uplink has sent everything queued on it (trio time)
    down_free: float = 0.0


def mean_session_s() -> float:
    """Mean of the Weibull session length: scale · Γ(1 + 1/shape)."""
    return WEIBULL_SCALE_S * math.gamma(1 + 1 / WEIBULL_SHAPE)


def draw_access(rng: random.Random) -> Access:
    share, lat, lon = rng.choices(REGIONS, weights=[r[0] for r in REGIONS])[0]
    lat = max(-89.0, min(89.0, rng.gauss(lat, REGION_SPREAD_DEG)))
    lon = rng.gauss(lon, REGION_SPREAD_DEG * 1.5)
    phi, lam = math.radians(lat), math.radians(lon)
    xyz = (math.cos(phi) * math.cos(lam), math.cos(phi) * math.sin(lam), math.sin(phi))
    loss = rng.choices([c[1] for c in LOSS_CLASSES], weights=[c[0] for c in LOSS_CLASSES])[0]
    return Access(
        xyz=xyz,
        rtt=ACCESS_RTT_MEDIAN * math.exp(rng.gauss(0.0, 0.5)),
        loss=loss,
        up=UP_MEDIAN_BPS / 8 * math.exp(rng.gauss(0.0, RATE_SIGMA)),
        down=DOWN_MEDIAN_BPS / 8 * math.exp(rng.gauss(0.0, RATE_SIGMA)),
    )


def rtt_between(a: Access, b: Access) -> float:
    dot = sum(x * y for x, y in zip(a.xyz, b.xyz, strict=True))
    km = EARTH_KM * math.acos(max(-1.0, min(1.0, dot)))
    return a.rtt + b.rtt + PATH_INFLATION * 2 * km / LIGHT_KM_S


def wire_bytes(nbytes: int) -> int:
    """What a message of `nbytes` costs on the wire: muxer and Noise framing, TCP/IP headers."""
    packets = max(1, -(-(nbytes + PER_MESSAGE) // PACKET))
    return nbytes + PER_MESSAGE + packets * PER_PACKET


def lost(rng: random.Random, a: Access, b: Access, nbytes: int) -> bool:
    """Whether a message of `nbytes` from a to b loses at least one packet."""
    packets = max(1, -(-nbytes // PACKET))
    return rng.random() < 1.0 - (1.0 - (a.loss + b.loss)) ** packets


def retransmit_delay(rtt: float) -> float:
    return max(MIN_RTO, 2 * rtt)
