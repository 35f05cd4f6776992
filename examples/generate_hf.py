"""Text from a model that `peertrain run export --format hf` wrote, with transformers alone.

    python -I examples/generate_hf.py real-run-model \
        --tokenizer build/corpus/<digest>/tokenizer.json --prompt "The kernel"

Nothing of peertrain is imported (`-I` keeps the working folder off the path): the export is a
transformers folder (config.json and model.safetensors) that `AutoModelForCausalLM` loads, and
the tokenizer is the `tokenizers` file that `peertrain data prepare-corpus` trained beside the
token file. It samples `--max-new-tokens` after the prompt (top-k, seeded) and prints the text,
then, as its last line, one JSON object: the model's parameters and what was generated.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the export's folder (config.json, model.safetensors)")
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json beside the tokens")
    parser.add_argument("--prompt", default="The ")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True).eval()
    tokenizer = Tokenizer.from_file(args.tokenizer)
    prompt = tokenizer.encode(args.prompt).ids
    if not prompt:
        raise SystemExit("the prompt encodes to no tokens")
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=args.max_new_tokens,
            # the corpus's tokenizer has no end-of-text token: an id the config calls one is text
            min_new_tokens=args.max_new_tokens,
            do_sample=True,
            top_k=args.top_k,
            pad_token_id=0,
        )
    ids = out[0].tolist()
    print(tokenizer.decode(ids))
    print(
        json.dumps(
            {
                "params": sum(p.numel() for p in model.parameters()),
                "model_type": model.config.model_type,
                "prompt_tokens": len(prompt),
                "generated_tokens": len(ids) - len(prompt),
                "peertrain_imported": "peertrain" in sys.modules,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
