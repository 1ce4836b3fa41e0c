"""Does Hugging Face's transformers compute an exported model's function? Run in the reference environment
(tools/reference_env.sh: transformers), on an original model directory (MarianMTModel, NLLB's or M2M-100's
M2M100ForConditionalGeneration, mBART-50's MBartForConditionalGeneration) and the directory `--mode export --to
FORMAT:DIR` wrote from its import:

    .refenv/bin/python tools/check_hf_export.py ORIGINAL EXPORTED --sources expected.json

Both are loaded by `from_pretrained` (AutoModelForSeq2SeqLM and AutoTokenizer); the sources (a JSON file's "src"
list, as tests/data/import/*/expected.json hold them) are cut by each tokenizer and decoded greedily (20 new tokens at
most) by each model under the export's generation settings (its languages, banned and forced tokens), given to both
as tokens (a Marian export numbers them as jaxnat does): the sources must be the same pieces, the outputs too, and
each piece's log-probability the same within 1e-4.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

GENERATION = ("bad_words_ids", "forced_bos_token_id", "forced_eos_token_id")  # the export's, given to both models


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("original")
    parser.add_argument("exported")
    parser.add_argument("--sources", required=True)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    with open(args.sources, encoding="utf-8") as f:
        sources = json.load(f)["src"]
    with open(os.path.join(args.exported, "generation_config.json"), encoding="utf-8") as f:
        generation = {k: v for k, v in json.load(f).items() if k in GENERATION}
    with open(os.path.join(args.exported, "tokenizer_config.json"), encoding="utf-8") as f:
        src_lang = json.load(f).get("src_lang")
    # the export's settings as tokens, numbered by each tokenizer in turn
    tokens = AutoTokenizer.from_pretrained(args.exported).convert_ids_to_tokens
    generation = {k: [tokens(ids) for ids in v] if k == "bad_words_ids" else tokens(v) for k, v in generation.items()}
    ids, pieces, logps = [], [], []
    for directory in (args.original, args.exported):
        tokenizer = AutoTokenizer.from_pretrained(directory)
        if src_lang:
            tokenizer.src_lang = src_lang
        numbered = tokenizer.convert_tokens_to_ids
        settings = {k: [numbered(t) for t in v] if k == "bad_words_ids" else numbered(v) for k, v in generation.items()}
        model = AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
        batch = tokenizer(sources, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=20, num_beams=1, do_sample=False, **settings)
            # (use_cache=False: with the cache on, FSMT's full pass leaves out its causal mask)
            logp = torch.log_softmax(model(**batch, decoder_input_ids=out, use_cache=False).logits, -1)
        chosen = logp[:, :-1].gather(-1, out[:, 1:, None])[..., 0]
        real = out[:, 1:] != tokenizer.pad_token_id
        ids.append([tokenizer.convert_ids_to_tokens(row.tolist()) for row in batch["input_ids"]])
        pieces.append([tokenizer.convert_ids_to_tokens(row.tolist()) for row in out])
        logps.append([row[keep].tolist() for row, keep in zip(chosen, real)])
    same = ids[0] == ids[1] and pieces[0] == pieces[1]
    worst = max(abs(a - b) for x, y in zip(*logps) for a, b in zip(x, y))
    print(f"the same source pieces and greedy pieces: {same}; largest difference of a piece's log-probability: "
          f"{worst:.2e}")
    return 0 if same and worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
