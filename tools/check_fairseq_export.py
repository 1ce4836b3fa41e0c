"""Does fairseq compute an exported model's function? Run in the reference environment (tools/reference_env.sh:
fairseq 0.12.2) on the directory `--mode export --to fairseq:DIR` wrote:

    .refenv/bin/python tools/check_fairseq_export.py DIR --original ORIGINAL.pt --sources expected.json
    .refenv/bin/python tools/check_fairseq_export.py DIR --scores scores.jsonl
    .refenv/bin/python tools/check_fairseq_export.py DIR --translations hyps.jsonl --max-iter 9 --beam 3
    .refenv/bin/python tools/check_fairseq_export.py DIR --translations hyps.jsonl --dat-plugin CHECKOUT

The export is loaded as fairseq's hub loads a model directory (`TransformerModel.from_pretrained`: the checkpoint's
own settings, its dictionaries and BPE file beside it; a `translation_lev` model's through its task, which puts
`<s>` before each source).

--original (a checkpoint fairseq saved, which jaxnat imported before exporting): the original is loaded the same
way (with the BPE file its settings name, in its directory); the two state dicts must hold the same tensors under
the same names (but the fused copies fairseq 0.12 derives at loading, and the values of the sinusoidal tables'
uninitialised one-element buffers), the settings the same architecture and options, and the sources (--sources: a
JSON file's "src" list, as tests/data/import/fairseq/expected.json holds them) the same pieces and the same
translations, greedy and at beam 4, with the same scores.

A `translation_lev` model (CMLM, NAT, LevT) is decoded by fairseq's `IterativeRefinementGenerator` with
--max-iter and --beam (its `--iter-decode-max-iter` and `--iter-decode-with-beam`: jaxnat's cmlm.mask_predict_iter
minus 1, 0 for NAT, levt.max_iter; the length beam), one sentence at a time. A DA-Transformer (the authors' plugin's
`glat_decomposed_link`; --dat-plugin: a checkout of thu-coai/DA-Transformer, whose fs_plugins registers it) by the
plugin's own `forward_decoder`, with the decoding its settings name; its outputs carry no score (texts compared).

--translations (a `translation_lev` or DA-Transformer export; what `--mode translate` printed for JSON lines
`{"src": …}`, with `--config.eval.search_rules=fairseq` but for the DA-Transformer: each source with its "hyp" and
"score"): fairseq's output is the same text with the same score within 1e-4. A DA-Transformer's output that differs
only as the two conventions on reserved tokens do (`Dat.under_jaxnat_convention`) is printed as such, not failed.

--scores (what `--mode score --config.eval.token_scores=true` printed for source/translation pairs, JSON lines with
"src", "tgt", "pieces" and "token_logp"; a model trained or fine-tuned here): fairseq cuts each translation into the
same pieces and gives each piece, and the end, the same log-probability within 1e-4.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# fairseq 0.12's encoder layers keep copies of their weights for PyTorch's fused path, derived when loading
FUSED = ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias", "fc1_weight", "fc1_bias",
         "fc2_weight", "fc2_bias")
# settings whose value the export must carry over (the rest: training's, or the paths of the original's files)
MODEL_SETTINGS = ("arch", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads",
                  "encoder_normalize_before", "encoder_learned_pos", "decoder_embed_dim", "decoder_ffn_embed_dim",
                  "decoder_layers", "decoder_attention_heads", "decoder_normalize_before", "decoder_learned_pos",
                  "share_all_embeddings", "share_decoder_input_output_embed", "no_scale_embedding",
                  "layernorm_embedding", "activation_fn", "alignment_layer", "alignment_heads",
                  "full_context_alignment")


class Lev:
    """A `translation_lev` checkpoint with the hub's text pipeline, decoded by fairseq's iterative generator."""

    def __init__(self, directory: str, name: str, max_iter: int, beam: int):
        from fairseq.iterative_refinement_generator import IterativeRefinementGenerator

        self.load(directory, name)
        self.generator = IterativeRefinementGenerator(self.hub.tgt_dict, models=self.models, max_iter=max_iter,
                                                      beam_size=beam)

    def load(self, directory: str, name: str) -> None:
        from fairseq import checkpoint_utils
        from fairseq.hub_utils import GeneratorHubInterface

        overrides = {"data": directory}  # the text pipeline's files, where they lie (the export names them alone)
        for key, file in (("bpe_codes", "bpecodes"), ("sentencepiece_model", "sentencepiece.bpe.model")):
            if os.path.isfile(os.path.join(directory, file)):
                overrides[key] = os.path.join(directory, file)
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([os.path.join(directory, name)],
                                                                          arg_overrides=overrides)
        self.hub = GeneratorHubInterface(cfg, task, models)
        self.hub.eval()
        self.models, self.task = list(self.hub.models), task

    def translate(self, source: str) -> tuple[str, float]:
        import torch

        src = torch.cat([torch.tensor([self.hub.src_dict.bos()]), self.hub.encode(source)])
        sample = {"net_input": {"src_tokens": src[None], "src_lengths": torch.tensor([len(src)])}}
        with torch.no_grad():
            best = self.generator.generate(self.models, sample)[0][0]
        return self.hub.decode(best["tokens"]), float(best["score"])


class Dat(Lev):
    """A DA-Transformer plugin's checkpoint (thu-coai/DA-Transformer's fs_plugins, a checkout at ``plugin``),
    decoded one sentence at a time by its own `forward_decoder` with the strategy its settings name."""

    def __init__(self, directory: str, name: str, plugin: str):
        sys.path.append(plugin)  # last: its fs_plugins, not the fairseq fork beside it
        import fs_plugins  # noqa: F401  (registers the architecture and the task)

        self.load(directory, name)

    def translate(self, source: str) -> tuple[str, None]:
        return self.text(self.decode(source)[0]), None

    def text(self, tokens) -> str:
        import torch

        d = self.hub.tgt_dict
        tokens = torch.as_tensor(tokens)
        return self.hub.decode(tokens[(tokens != d.pad()) & (tokens != d.bos()) & (tokens != d.eos())])

    def decode(self, source: str):
        """(the plugin's output tokens, its graph: token log-probabilities float[L, V] and links float[L, L] as
        its decoding reads them) of ``source``."""
        import torch

        model, graph = self.models[0], {}
        src = self.hub.encode(source)
        if self.task.cfg.prepend_bos:
            src = torch.cat([torch.tensor([self.hub.src_dict.bos()]), src])

        def inference(decoder_out, logits, links):  # the plugin's own, its inputs kept
            graph.update(logp=logits.log_softmax(-1)[0].numpy(), links=links[0].numpy())
            return type(model).inference(model, decoder_out, logits, links)

        model.inference = inference
        try:
            with torch.no_grad():
                enc = model.forward_encoder([src[None], torch.tensor([len(src)])])
                tokens = model.forward_decoder(model.initialize_output_tokens(enc, src[None]), enc).output_tokens[0]
        finally:
            del model.inference
        return tokens, graph

    def under_jaxnat_convention(self, source: str) -> str | None:
        """The plugin's lookahead or greedy decoding (its own functions, n-gram prevention included) of its own graph
        of ``source`` under jaxnat's convention on reserved tokens (docs/dat.md): vertex 0 emits `<s>`, the last
        vertex `</s>`, inner vertices any token but `<s>`, `</s>` and `<pad>` (the others' log-probabilities
        -inf, the rest unchanged), where the plugin takes each vertex's best of the whole vocabulary. None where the
        plugin decodes otherwise (Viterbi, beam search, sampling)."""
        import torch

        model, d = self.models[0], self.hub.tgt_dict
        args = model.args
        if args.decode_strategy not in ("lookahead", "greedy"):
            return None
        graph = self.decode(source)[1]
        logp, last = torch.from_numpy(graph["logp"]).clone(), len(graph["logp"]) - 1
        logp[1:last, [d.bos(), d.eos(), d.pad()]] = float("-inf")
        for vertex, token in ((0, d.bos()), (last, d.eos())):
            logp[vertex, torch.arange(len(d)) != token] = float("-inf")
        prevents = args.decode_no_consecutive_repeated_ngram > 0 or (
            args.decode_no_repeated_ngram > 0 and args.decode_strategy == "lookahead")  # (the plugin's own test)
        decode = model.inference_lookahead_repeatprevent if prevents else model.inference_lookahead_simple
        tokens = decode(torch.from_numpy(graph["links"])[None], logp[None], torch.tensor([last + 1]))[0][0]
        return self.text(tokens)


def read_part(key: str, tensor, dat: bool):
    """What a model reads of its tensor ``key``: a learned position table from row 2 (rows 0 and 1, padding_idx and
    the one before it, never), a DA-Transformer's decoder tables but their last row (its graphs stop a vertex short
    of it); None for a tensor it never reads (a sinusoidal table's one-element buffer; a DA-Transformer's length
    head of upsample_base=predict, which the export writes as zeros)."""
    if key.endswith("_float_tensor") or (dat and key == "decoder.embed_length.weight"):
        return None
    if key.endswith(("embed_positions.weight", "link_positional.weight")):
        return tensor[2:-1] if dat and key.startswith("decoder.") else tensor[2:]
    return tensor


def against_original_lev(original: Lev, exported: Lev, sources: list[str]) -> list[str]:
    problems = []
    states = [h.models[0].state_dict() for h in (original, exported)]
    if set(states[0]) != set(states[1]):
        problems.append(f"state dict names differ: {sorted(set(states[0]) ^ set(states[1]))[:6]}")
    dat = isinstance(exported, Dat)
    for key in sorted(set(states[0]) & set(states[1])):
        theirs, ours = (read_part(key, state[key], dat) for state in states)
        if theirs is not None and not theirs.equal(ours):
            problems.append(f"{key} differs")
    for source in sources:
        (a, sa), (b, sb) = original.translate(source), exported.translate(source)
        if a != b or (sa is not None and abs(sa - sb) > 1e-5):
            problems.append(f"{source!r}: {a!r} ({sa}) != {b!r} ({sb})")
    print(f"{len(states[1])} tensors, {len(sources)} sources: " + " | ".join(exported.translate(s)[0] for s in sources))
    return problems


def against_translations(exported: Lev, rows: list[dict]) -> list[str]:
    """fairseq's translation of each row's source against jaxnat's; a DA-Transformer's that differs but is the
    plugin's graph walked under jaxnat's convention on reserved tokens (`Dat.under_jaxnat_convention`) is listed
    as that convention's, not as a mismatch."""
    problems, convention, worst = [], [], 0.0
    for row in rows:
        hyp, score = exported.translate(row["src"])
        gap = 0.0 if score is None else abs(score - row["score"])  # (the plugin's decoders give none)
        worst = max(worst, gap)
        if hyp != row["hyp"] or gap > 1e-4:
            line = f"{row['src']!r}: fairseq {hyp!r} ({score}), jaxnat {row['hyp']!r} ({row['score']:.6f})"
            ours = isinstance(exported, Dat) and exported.under_jaxnat_convention(row["src"]) == row["hyp"]
            (convention if ours else problems).append(line)
    for line in convention:
        print("RESERVED TOKENS:", line)
    print(f"{len(rows)} sources, {len(rows) - len(problems) - len(convention)} the same translation"
          + (f", {len(convention)} the plugin's graph walked under jaxnat's convention on reserved tokens (a vertex "
             f"whose best token is <s>, </s> or <pad> where jaxnat's decoders emit none: docs/dat.md)"
             if convention else "") + f", scores at most {worst:.2e} apart")
    return problems


def _task(directory: str, name: str) -> str:
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(os.path.join(directory, name))["cfg"].task._name


def _load(directory: str, name: str):
    from fairseq.models.transformer import TransformerModel

    codes = os.path.join(directory, "bpecodes")
    extra = {"bpe_codes": codes} if os.path.isfile(codes) else {}
    return TransformerModel.from_pretrained(directory, checkpoint_file=name, data_name_or_path=directory,
                                            **extra).eval()


def against_original(original, exported, sources) -> list[str]:
    import torch

    hubs = [original, exported]
    problems = []
    states = [{k: v for k, v in h.models[0].state_dict().items() if not k.endswith(FUSED)} for h in hubs]
    if set(states[0]) != set(states[1]):
        problems.append(f"state dict names differ: {sorted(set(states[0]) ^ set(states[1]))[:6]}")
    for key in sorted(set(states[0]) & set(states[1])):
        placeholder = key.endswith("_float_tensor")  # a sinusoidal table's one-element buffer, never read
        if states[0][key].shape != states[1][key].shape or not (placeholder or torch.equal(states[0][key],
                                                                                           states[1][key])):
            problems.append(f"{key} differs")
    settings = [vars(h.cfg.model) if not hasattr(h.cfg.model, "_content") else dict(h.cfg.model) for h in hubs]
    for key in MODEL_SETTINGS:
        if settings[0].get(key) != settings[1].get(key):
            problems.append(f"setting {key}: {settings[0].get(key)!r} != {settings[1].get(key)!r}")
    pieces = [[h.apply_bpe(h.tokenize(s)) for s in sources] for h in hubs]
    if pieces[0] != pieces[1]:
        problems.append(f"the sources' pieces differ: {pieces[0][0]!r} != {pieces[1][0]!r}")
    for beam in (1, 4):
        outs = [[h.generate(h.encode(s), beam=beam)[0] for s in sources] for h in hubs]
        for source, a, b in zip(sources, *outs):
            if a["tokens"].tolist() != b["tokens"].tolist() or abs(float(a["score"]) - float(b["score"])) > 1e-5:
                problems.append(f"beam {beam}, {source!r}: {hubs[0].decode(a['tokens'])!r} ({float(a['score']):.6f}) "
                                f"!= {hubs[1].decode(b['tokens'])!r} ({float(b['score']):.6f})")
        print(f"beam {beam}: " + " | ".join(hubs[1].decode(o["tokens"]) for o in outs[1]))
    print(f"{len(states[1])} tensors, {len(sources)} sources")
    return problems


def against_scores(hub, rows: list[dict]) -> list[str]:
    """fairseq's teacher-forced log-probability of each piece of each row's translation (its decoder starts from
    </s>, as its generator does) against jaxnat's."""
    import torch

    problems, worst = [], 0.0
    model, dictionary = hub.models[0], hub.tgt_dict
    for row in rows:
        src, tgt = hub.encode(row["src"]), hub.encode(row["tgt"])  # pieces' ids, then </s>
        pieces = [dictionary[i] for i in tgt[:-1].tolist()]
        if pieces != row["pieces"][:-1]:
            problems.append(f"{row['tgt']!r}: fairseq's pieces {pieces} != jaxnat's {row['pieces'][:-1]}")
            continue
        previous = torch.cat([torch.tensor([dictionary.eos()]), tgt[:-1]])[None]
        with torch.no_grad():
            logits = model(src[None], torch.tensor([len(src)]), previous)[0]
        logp = torch.log_softmax(logits.float(), dim=-1)[0].gather(1, tgt[:, None])[:, 0].tolist()
        gap = max(abs(a - b) for a, b in zip(logp, row["token_logp"]))
        worst = max(worst, gap)
        if len(logp) != len(row["token_logp"]) or gap > 1e-4:
            problems.append(f"{row['tgt']!r}: log-probabilities {gap:.2e} apart")
    print(f"{len(rows)} pairs, the pieces' log-probabilities at most {worst:.2e} from jaxnat's")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exported")
    parser.add_argument("--original", help="the checkpoint the export came from (imported, exported unchanged)")
    parser.add_argument("--sources", help="with --original: a JSON file whose 'src' list is translated by both")
    parser.add_argument("--scores", help="JSON lines of --mode score --config.eval.token_scores=true")
    parser.add_argument("--translations", help="a translation_lev export: JSON lines of src, hyp and score")
    parser.add_argument("--max-iter", type=int, default=9, help="--iter-decode-max-iter (translation_lev)")
    parser.add_argument("--beam", type=int, default=1, help="--iter-decode-with-beam (translation_lev)")
    parser.add_argument("--dat-plugin", metavar="DIR", help="a DA-Transformer export: a checkout of "
                        "thu-coai/DA-Transformer (its fs_plugins)")
    args = parser.parse_args(argv)
    if not args.scores and not args.translations and not (args.original and args.sources):
        parser.error("give --original with --sources, --scores or --translations")

    def rows(path: str) -> list[dict]:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    task = "translation_dat_task" if args.dat_plugin else _task(args.exported, "model.pt")  # (needs the plugin)
    lev = task != "translation"
    if (args.scores and lev) or (args.translations and not lev):
        parser.error("--scores checks a translation task's model, --translations a translation_lev one")
    load = {"translation": _load, "translation_lev": lambda d, name: Lev(d, name, args.max_iter, args.beam),
            "translation_dat_task": lambda d, name: Dat(d, name, args.dat_plugin)}[task]
    exported = load(args.exported, "model.pt")
    problems = []
    if args.original:
        with open(args.sources, encoding="utf-8") as f:
            sources = json.load(f)["src"]
        original = load(os.path.dirname(os.path.abspath(args.original)), os.path.basename(args.original))
        problems += (against_original_lev if lev else against_original)(original, exported, sources)
    if args.scores:
        problems += against_scores(exported, rows(args.scores))
    if args.translations:
        problems += against_translations(exported, rows(args.translations))
    for problem in problems:
        print("MISMATCH:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
