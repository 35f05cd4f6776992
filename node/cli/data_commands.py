"""`peertrain data prepare-corpus`: a real corpus as a token file, in one cached step.

    peertrain data prepare-corpus              # Debian's linux-doc (apt-get install linux-doc)
    peertrain data prepare-corpus --source pydoc --vocab-size 512   # small, in every Python
    peertrain data prepare-corpus --quiet      # prints only the folder (for scripts)

The work is swarm/data/prepare.py's; this module parses and prints. The folder it names holds
train.bin (what `--dataset tokens --data` trains on), val.bin, tokenizer.json and meta.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def default_out() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("peertrain", appauthor=False)) / "corpora"


def add_data_commands(commands: Any) -> None:
    data = commands.add_parser("data", help="prepare training data").add_subparsers(
        metavar="ACTION"
    )
    p = data.add_parser(
        "prepare-corpus",
        help="English text from an installed package, a BPE tokenizer trained here, and token "
        "files (train.bin, 1%% val.bin), cached by the digest of inputs and settings",
    )
    p.add_argument(
        "--source",
        default="linux-doc",
        metavar="linux-doc|pydoc|PATH",
        help="linux-doc: Debian's linux-doc package (apt-get install linux-doc; 23 MB of text); "
        "pydoc: Python's help topics (0.5 MB); or a text file or folder (default linux-doc)",
    )
    p.add_argument(
        "--out", type=Path, help=f"cache folder (default {default_out()}); output in OUT/DIGEST/"
    )
    p.add_argument(
        "--vocab-size", type=int, default=8192, help="BPE vocabulary, a multiple of 64 (8192)"
    )
    p.add_argument(
        "--max-bytes", type=int, default=0, help="cleaned text kept at most (default 0: all)"
    )
    p.add_argument(
        "--chunk-tokens", type=int, default=1024, help="unit of the 99/1 split (default 1024)"
    )
    p.add_argument("--doc-root", type=Path, help=argparse.SUPPRESS)  # tests: a machine without it
    p.add_argument("--quiet", action="store_true", help="print only the output folder")
    p.add_argument("--json", action="store_true", help="print the folder's meta.json and paths")
    p.set_defaults(handler=cmd_prepare_corpus)


def cmd_prepare_corpus(args: argparse.Namespace) -> int:
    from peertrain.swarm.data.doc_corpus import DOC_ROOT
    from peertrain.swarm.data.prepare import CorpusSettings, prepare_corpus

    settings = CorpusSettings(
        vocab_size=args.vocab_size, max_bytes=args.max_bytes, chunk_tokens=args.chunk_tokens
    )
    prepared = prepare_corpus(
        args.source, args.out or default_out(), settings, doc_root=args.doc_root or DOC_ROOT
    )
    if args.quiet:
        print(prepared.folder)
    elif args.json:
        paths = {"folder": str(prepared.folder), "train": str(prepared.train)}
        print(json.dumps({**prepared.meta, **paths, "cached": prepared.cached}))
    else:
        print(summary(prepared))
    return 0


def summary(prepared: Any) -> str:
    m = prepared.meta
    vocab = m["settings"]["vocab_size"]
    share = m["tokens_val"] / (m["tokens_train"] + m["tokens_val"])
    return "\n".join(
        [
            f"corpus      {m['source']}: {m['documents']} documents, {m['raw_bytes'] / 1e6:.1f} MB"
            f" installed, {m['clean_bytes'] / 1e6:.1f} MB cleaned ({m['found_at']})",
            f"tokenizer   byte-level BPE, {m['vocab_learned']} tokens learned of {vocab}",
            f"tokens      {m['tokens_train']:,} train, {m['tokens_val']:,} validation "
            f"({share:.1%})",
            f"folder      {prepared.folder}" + ("  (cached)" if prepared.cached else ""),
            f"train with  --dataset tokens --data {prepared.train} "
            f"--set model_settings.vocab_size={vocab}",
        ]
    )
