"""The signed announcement of an update: who sent it, its size and checksum, and whether the
signer is its sender or only holds a copy. Receivers pull the payload by its checksum."""

from __future__ import annotations

from typing import Annotated

from peertrain.protocol.messages import Message, message
from peertrain.protocol.schema import IntRange, MaxLen


@message("diloco/update-announcement", max_size=512)
class UpdateAnnouncement(Message):
    sender: Annotated[str, MaxLen(128)]  # whose update it is
    nbytes: Annotated[int, IntRange(0, 2**40)]
    checksum: Annotated[bytes, MaxLen(32)]
    holds: bool = False  # True: the signer is not the sender, it merely holds a copy
