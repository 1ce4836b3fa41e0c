"""Does Hugging Face's MarianMTModel compute an exported model's function? Run in the reference environment
(tools/reference_env.sh: transformers), on an original MarianMTModel directory and the directory `--mode export
--to marian:DIR` wrote from its import:

    .refenv/bin/python tools/check_hf_export.py ORIGINAL EXPORTED --sources expected.json

Both are loaded by `from_pretrained` (model and MarianTokenizer); the sources (a JSON file's "src" list, as
tests/data/import/*/expected.json hold them) are cut by each tokenizer and decoded greedily (20 new tokens at most)
by each model: the outputs must be the same pieces, and each piece's log-probability the same within 1e-4.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("original")
    parser.add_argument("exported")
    parser.add_argument("--sources", required=True)
    args = parser.parse_args(argv)

    import torch
    from transformers import MarianMTModel, MarianTokenizer

    with open(args.sources, encoding="utf-8") as f:
        sources = json.load(f)["src"]
    pieces, logps = [], []
    for directory in (args.original, args.exported):
        tokenizer = MarianTokenizer.from_pretrained(directory)
        model = MarianMTModel.from_pretrained(directory).eval()
        batch = tokenizer(sources, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=20, num_beams=1, do_sample=False)
            logp = torch.log_softmax(model(**batch, decoder_input_ids=out).logits, -1)
        chosen = logp[:, :-1].gather(-1, out[:, 1:, None])[..., 0]
        real = out[:, 1:] != tokenizer.pad_token_id
        pieces.append([tokenizer.convert_ids_to_tokens(row.tolist()) for row in out])
        logps.append([row[keep].tolist() for row, keep in zip(chosen, real)])
    same = pieces[0] == pieces[1]
    worst = max(abs(a - b) for x, y in zip(*logps) for a, b in zip(x, y))
    print(f"greedy outputs the same pieces: {same}; largest difference of a piece's log-probability: {worst:.2e}")
    return 0 if same and worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
