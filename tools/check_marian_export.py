"""Does Marian compute an exported model's function? The directory `--mode export --to marian-npz:DIR` wrote,
decoded by Marian itself (pymarian, tools/marian_reference.py) beside the workdir it came from:

    python tools/check_marian_export.py DIR --workdir WORKDIR --pymarian /tmp/pm/bin/python \
        --sources ../shared/data/multi30k/test_2016_flickr.en.gz [--sentences 32]

The first --sentences sources are cut into pieces by the export's source.spm and given to Marian's greedy and beam-4
search (decoder.yml's normalize) with each output piece's log-probability (its word scores), at most twice a
source's pieces and end long (max-length-factor 2); the workdir decodes the same pieces greedily under the same
limit (eval.max_len_a 2) and scores Marian's outputs (`Translator.score_ids`). Required: the same greedy outputs, piece
for piece, and every word score within 1e-4 of the workdir's log-probability of that piece (or of the end).
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 1e-4


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", help="the directory --to marian-npz:DIR wrote")
    parser.add_argument("--workdir", required=True, help="the workdir it was exported from")
    parser.add_argument("--pymarian", required=True, metavar="PYTHON", help="a Python with pymarian 1.12.42")
    parser.add_argument("--sources", required=True, help="source sentences, one a line (.gz read as gzip)")
    parser.add_argument("--sentences", type=int, default=32)
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    import numpy as np
    import sentencepiece as spm
    import yaml

    from jaxnat.config import workdir_config
    from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
    from jaxnat.restore import load_translator
    from marian_reference import decode

    opener = gzip.open if args.sources.endswith(".gz") else open
    with opener(args.sources, "rt", encoding="utf-8") as f:
        texts = [line.strip() for line, _ in zip(f, range(args.sentences))]
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.export, "source.spm"))
    sources = [" ".join(sp.encode(t, out_type=str)) for t in texts]
    with open(os.path.join(args.export, "decoder.yml"), encoding="utf-8") as f:
        decoding = yaml.safe_load(f)
    marian = decode(args.pymarian, args.export, decoding["models"][0], decoding["vocabs"], sources,
                    float(decoding.get("normalize", 0.6)))

    config = workdir_config(args.workdir)
    config.eval.max_len_a, config.eval.max_len_b = 2.0, 0  # Marian's max-length-factor 2: × the pieces and end
    translator = load_translator(config, args.workdir)
    tok = translator.tokenizer
    src = [np.asarray([BOS_ID, *(tok.piece_id(p, "src") or UNK_ID for p in s.split()), EOS_ID], np.int32)
           for s in sources]
    greedy = translator.translate_ids(src, beam_size=1, batch_size=len(src))
    ours = [[tok.id_to_piece(int(t), "tgt") for t in r["tokens"] if t not in (PAD_ID, BOS_ID, EOS_ID)] for r in greedy]
    same = sum(a == h["pieces"] for a, h in zip(ours, marian["beam1"]))
    worst = 0.0
    for beam in ("beam1", "beam4"):
        hyps = marian[beam]
        scored = translator.score_ids(src, [[tok.piece_id(p, "tgt") for p in h["pieces"]] for h in hyps],
                                      len(src), token_scores=True)
        for s, h in zip(scored, hyps):
            n = len(h["word_scores"])  # the pieces, and the end where Marian's output has one (not at the limit)
            worst = max(worst, float(np.max(np.abs(np.asarray(s["token_logp"][:n]) - h["word_scores"]))))
    pieces = sum(len(h["pieces"]) for h in marian["beam1"])
    print(f"greedy outputs identical: {same}/{len(src)} ({pieces} pieces); largest difference of a word score "
          f"(greedy and beam 4): {worst:.2e}")
    return 0 if same == len(src) and worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
