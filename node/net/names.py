"""Friendly three-word names for peer IDs ("brave-amber-otter").

A name is derived from a hash of the peer ID, so every node computes the same name for a
peer without asking it. About 600 000 combinations: a convenience for humans reading logs and
dashboards, never an identifier (two peers may share a name; IDs never collide).

The word lists are part of the naming scheme: changing either list renames every peer, so treat
them as frozen.
"""

from __future__ import annotations

import hashlib

_ADJECTIVES = (
    "able amber ancient azure bold brave bright brisk calm clever cobalt cosmic crimson curious "
    "daring dusty eager early easy electric fancy fearless fluffy frosty gentle giant golden "
    "graceful happy hidden honest humble icy jolly keen kind lively lucky mellow merry mighty "
    "misty nimble noble olive patient plucky polite proud quick quiet rapid rosy rusty shiny "
    "silent silver sleepy smooth snowy solar spry steady sunny swift tidy witty"
).split()

_NOUNS = (
    "acorn albatross alpaca anchor antelope aspen badger bamboo beacon beaver birch bison "
    "bobcat breeze brook buffalo canyon cedar cheetah cliff comet condor coral cougar coyote "
    "crane cricket crow cypress dawn delta dingo dolphin dove dune eagle ember falcon fern "
    "ferret finch fjord flamingo fox gazelle gecko glacier grove gull harbor hare hawk heron "
    "hornet husky ibis iguana island jackal jaguar jay kestrel kiwi koala lagoon lark lemur "
    "leopard lichen lily llama lynx magpie maple marmot meadow meerkat mesa mink mole moose "
    "moth newt nebula oak ocelot octopus orca osprey otter owl panda panther parrot pebble "
    "pelican penguin pine plover pony prairie puffin quail quasar rabbit raven reef river "
    "robin salmon sequoia shark sparrow spruce squid stork summit swan tapir tern tiger "
    "toucan trout tundra turtle valley viper walrus willow wolf wombat yak zebra"
).split()


def friendly_name(peer_id: str) -> str:
    """Three words derived from the peer ID's text form; stable across machines and versions."""
    digest = hashlib.blake2b(peer_id.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    value, first = divmod(value, len(_ADJECTIVES))
    value, second = divmod(value, len(_ADJECTIVES))
    noun = value % len(_NOUNS)
    return f"{_ADJECTIVES[first]}-{_ADJECTIVES[second]}-{_NOUNS[noun]}"
