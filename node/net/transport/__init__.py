"""Our Noise and Yamux data path: the same protocols on the wire, several times faster.

py-libp2p 0.8.1 moves about 0.2 GB/s over one Noise+Yamux stream on a loopback where TCP moves
about 3 GB/s. The handshake is not the problem; the data path is (see `noise.py` and
`yamux.py` for what each replaces and why). The protocol IDs are libp2p's (`/noise`,
`/yamux/1.0.0`), so a stock py-libp2p or go-libp2p peer talks to us unchanged.

    sec_opt = {NOISE_ID: NoiseTransport(key_pair, noise_privkey=...)}
    muxer_opt = {YAMUX_ID: YamuxConnection}
    host = new_host(..., sec_opt=sec_opt, muxer_opt=muxer_opt)
    use_registered_muxers(host, muxer_opt)   # upstream would build its own Yamux otherwise
    use_pipelined_negotiation(host)          # multistream-select in one round trip, not two
"""

from .errors import NoiseError, TransportError, YamuxProtocolError
from .multiselect import PipelinedMultiselectClient, use_pipelined_negotiation
from .noise import PROTOCOL_ID as NOISE_ID
from .noise import NoiseSession, NoiseTransport
from .upgrade import RegisteredMuxers, use_registered_muxers
from .yamux import PROTOCOL_ID as YAMUX_ID
from .yamux import YamuxConfig, YamuxConnection

__all__ = [
    "NOISE_ID",
    "YAMUX_ID",
    "NoiseError",
    "NoiseSession",
    "NoiseTransport",
    "PipelinedMultiselectClient",
    "RegisteredMuxers",
    "TransportError",
    "YamuxConfig",
    "YamuxConnection",
    "YamuxProtocolError",
    "use_pipelined_negotiation",
    "use_registered_muxers",
]
