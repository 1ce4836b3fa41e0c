"""DA-Transformer (Huang et al. 2022): a decoder over a directed acyclic graph of λ · |x| vertices, trained with
the DAG loss and glancing on the graph's best alignment; greedy, lookahead, Viterbi and joint Viterbi (Shao et al.
2022) and beam decoding, sampling, and the authors' own beam search and sampling; hard constraints as a
constrained best path (Control-DAG's semantics). docs/dat.md. Its config section is `config.dat`."""

from jaxnat.errors import ConfigError
from jaxnat.models.dat.model import SUPPORTS, VITERBI, build_spec
from jaxnat.models.family import Family


def defaults() -> dict:
    return dict(
        # λ: the graph has λ · (source tokens − 2) + 2 vertices (the paper's 8; BOS/EOS not upsampled, as the
        # authors' code's upsample_base=source)
        upsample=8,
        # λ of the graphs built at decoding (0: upsample); at most upsample (the vertex position tables' size)
        decode_upsample=0,
        # what λ multiplies (the authors' code's upsample_base): "source", the source's tokens but its BOS/EOS, or
        # "source_old", all of them (the graph then has λ · the source's tokens vertices; their older checkpoints)
        upsample_base="source",
        # the most vertices a graph has, the rows of its position tables (a larger graph is clipped, as the
        # authors' code clips to its tables; an imported model's), at least 3; 0: as many as sources of
        # model.max_len make
        max_vertices=0,
        # the transition scores: "paper" (one query/key projection of the vertex states, softmax over j > i) or
        # "multihead" (the authors' code: per-head softmaxes of states ⊕ learned link positions, mixed by a gate)
        links="paper",
        # the vertices' decoder inputs: "positions" (learned vertex positions, the paper) or "tokens" (the authors'
        # code: [BOS, UNK …, EOS] embeddings plus positions)
        vertex_inputs="positions",
        # glancing ratio, annealed linearly from glance_start down to glance_end over glance_steps updates (0:
        # train.steps; the paper's 0.5 → 0.1 over 200k); 0 and 0: no glancing (one pass)
        glance_start=0.5, glance_end=0.1, glance_steps=200000,
        # how many target tokens are revealed: "number" (round(ratio · mistakes on the best path), at random:
        # the paper, the authors' number-random) or "bernoulli" (each with probability ratio · mistakes / |y|)
        glance_count="number",
        # the authors' code's forced emission: a glanced token sits on its glanced vertex in the second pass's loss
        glance_fix_alignment=False,
        # decoding: greedy, lookahead (the authors' default), viterbi (Shao et al.'s joint Viterbi), path_viterbi
        # (their Viterbi: the path by its links alone), beam (over prefixes, paths summed; eval.beam_size
        # hypotheses) or dagsearch (the authors' beam search, DAG-Search, output for output: vertex by vertex, on
        # the host)
        decode="lookahead",
        # lookahead: the next vertex maximises its link + lookahead_beta · its best token's log-probability (and
        # dagsearch's candidate pairs are ranked so: the authors' decode_beta)
        lookahead_beta=1.0,
        # the Viterbi decodings (and the constrained search): the output length M maximises log P(y, a | x) /
        # M^viterbi_beta (path_viterbi: log P(a | x) / M^viterbi_beta)
        viterbi_beta=1.0,
        # their reading of M and of the score: "jaxnat" (M the path's vertices, BOS and EOS included, every vertex's
        # term) or "authors" (their code's, output for output: M its inner vertices, the EOS term left out, the
        # first inner vertex's token also in path_viterbi's score; an imported model's)
        viterbi_convention="jaxnat",
        # beam: the finished prefix maximising log P(y | x) / M^beam_alpha; each vertex's top_cand tokens extend it
        # (dagsearch: each vertex's top_cand best (vertex, token) pairs, prefixes ranked by their score / m^beam_alpha)
        beam_alpha=1.1, top_cand=5,
        # dagsearch: the prefixes of each length kept at a vertex (the authors' decode_max_beam_per_length)
        beam_per_length=10,
        # beam with eval.lm (an n-gram LM of target pieces): maximise [log P(y | x) + lm_weight · log10 P_lm(y)] /
        # M^beam_alpha (the authors' decode_gamma, on KenLM's log10 scores)
        lm_weight=0.1,
        # drop a decoded token equal to the one before it (the authors' greedy, lookahead and Viterbi decoders)
        remove_repeats=True,
        # with eval.no_repeat_ngram or eval.no_consecutive_repeat (the authors' n-gram prevention: greedy, lookahead
        # and beam step around repeats as they go, and samples draw them at 1e-5; docs/dat.md),
        # greedy and lookahead take a banned candidate after all once those tried hold more than top_p of the
        # probability (their decode_top_p); dagsearch extends a prefix by its candidate pairs until they hold top_p
        top_p=0.9,
        # eval.sampling's cut: "jaxnat" (eval.top_k, eval.top_p, eval.epsilon over every vertex's pairs, as the AR
        # model's samples) or "authors" (their `sample` decoding: each vertex's top_cand pairs of the tempered links
        # until they hold top_p, the token before and the banned ones at 1e-5; docs/dat.md)
        sampler="jaxnat",
        # soft constraints: the constrained search's reward (log-probability) for each phrase a path emits
        soft_reward=1.0,
    )


def validate(config) -> None:
    s = config.dat
    sweep = [int(v) for v in config.eval.iteration_sweep.split(",") if v.strip().isdigit()]  # each a decode_upsample
    for key, value in [("dat.decode_upsample", s.decode_upsample)] + [("eval.iteration_sweep", v) for v in sweep]:
        if value > s.upsample:
            raise ConfigError(f"{key} ({value}) must be at most dat.upsample ({s.upsample}): the vertex positions "
                              f"were trained for that many")
    if 0 < s.max_vertices < 3:  # vertex 0 emits BOS and n − 1 EOS: a smaller graph has no room for a token
        raise ConfigError(f"dat.max_vertices={s.max_vertices} leaves no vertex between BOS's and EOS's: 0 (as many "
                          f"as sources of model.max_len make) or at least 3")
    if s.glance_end > s.glance_start:
        raise ConfigError(f"dat.glance_end={s.glance_end} must not exceed dat.glance_start={s.glance_start} "
                          f"(the glancing ratio anneals down)")
    # the keys set that the chosen decoding does not read, every one in the same line (an imported model's, whose
    # decoding keys stay set when another decoder is chosen)
    unread = [f"eval.{key}={config.eval[key]} (the width of dat.decode=beam or dagsearch, or the samples a sentence "
              f"draws with eval.sampling=true; 1 otherwise)" for key in ("beam_size", "valid_beam_size")
              if config.eval[key] > 1 and s.decode not in ("beam", "dagsearch") and not config.eval.sampling]
    if (config.eval.no_repeat_ngram or config.eval.no_consecutive_repeat) and s.decode in VITERBI and not (
            config.eval.sampling):
        asked = ", ".join(f"eval.{k}={config.eval[k]}" for k in ("no_repeat_ngram", "no_consecutive_repeat")
                          if config.eval[k])
        raise ConfigError(f"{asked} steps around repeats in greedy, lookahead, beam and dagsearch decoding and "
                          f"sampling: set dat.decode=lookahead (or greedy, beam, dagsearch), not {s.decode!r}")
    prevents = config.eval.no_repeat_ngram or config.eval.no_consecutive_repeat
    authors_beam = s.decode == "dagsearch" and not config.eval.sampling
    authors_samples = s.sampler == "authors" and config.eval.sampling
    if s.sampler == "authors" and not config.eval.sampling:
        raise ConfigError("dat.sampler=authors is the cut of eval.sampling's samples: set eval.sampling=true")
    if authors_samples and (config.eval.top_k or config.eval.top_p != 1.0 or config.eval.epsilon):
        raise ConfigError(f"dat.sampler=authors cuts to dat.top_cand pairs and dat.top_p, not eval.top_k="
                          f"{config.eval.top_k}, eval.top_p={config.eval.top_p}, eval.epsilon={config.eval.epsilon}: "
                          f"leave those out")
    if s.top_p != defaults()["top_p"] and not (authors_beam or authors_samples) and (
            not prevents or s.decode not in ("greedy", "lookahead") or config.eval.sampling):
        unread.append(f"dat.top_p={s.top_p} (acts only in dat.decode=dagsearch, dat.sampler=authors and where greedy "
                      f"or lookahead decoding steps around repeats, eval.no_repeat_ngram or eval.no_consecutive_repeat "
                      f"set; {defaults()['top_p']} otherwise)")
    if s.beam_per_length != defaults()["beam_per_length"] and not authors_beam:
        unread.append(f"dat.beam_per_length={s.beam_per_length} (acts only in dat.decode=dagsearch without "
                      f"eval.sampling; {defaults()['beam_per_length']} otherwise)")
    if s.viterbi_convention != defaults()["viterbi_convention"] and (s.decode not in VITERBI or config.eval.sampling):
        unread.append(f"dat.viterbi_convention={s.viterbi_convention} (an imported Viterbi decoding's: read by "
                      f"dat.decode=viterbi and path_viterbi without eval.sampling; {defaults()['viterbi_convention']} "
                      f"otherwise)")
    if unread:
        raise ConfigError(f"dat.decode={s.decode!r}{' with eval.sampling' if config.eval.sampling else ''} reads "
                          f"none of {'; '.join(unread)}: choose the decoding that reads them, or reset them")
    if config.eval.lm and s.decode not in ("beam", "dagsearch"):
        raise ConfigError(f"eval.lm is fused into the beam searches: set dat.decode=beam or dagsearch "
                          f"(dat.decode={s.decode!r})")
    if config.train.label_smoothing > 0:
        raise ConfigError("the DAG loss sums over paths and takes no label smoothing: set train.label_smoothing=0")


def output_metrics(outs: list[dict], srcs: list[str]) -> dict:
    """The ratio of repeated tokens among those decoded, before their removal, overall and for short and long
    sources."""
    from jaxnat.evaluation.metrics import repeated_token_ratios

    return repeated_token_ratios([o["repeats"] for o in outs], [o["decoded"] for o in outs],
                                 [len(s.split()) for s in srcs])


FAMILY = Family(
    "dat", build_spec, SUPPORTS, doc="docs/dat.md", defaults=defaults,
    # no beam unless dat.decode=beam or dagsearch; the DAG loss takes no label smoothing
    shared={"eval.beam_size": 1, "train.label_smoothing": 0.0},
    choices={"links": ("paper", "multihead"), "upsample_base": ("source", "source_old"),
             "vertex_inputs": ("positions", "tokens"), "glance_count": ("number", "bernoulli"),
             "decode": ("greedy", "lookahead", *VITERBI, "beam", "dagsearch"), "sampler": ("jaxnat", "authors"),
             "viterbi_convention": ("jaxnat", "authors")},
    ranges={"upsample": ("[1", None), "max_vertices": ("[0", None), "decode_upsample": ("[0", None),
            "glance_start": ("[0", "1]"), "glance_end": ("[0", "1]"), "glance_steps": ("[0", None),
            # Viterbi's and the beam's exponents of the output length (256^10 fits a float32), lookahead's weight
            "lookahead_beta": ("[0", "10]"), "viterbi_beta": ("[0", "10]"), "beam_alpha": ("[0", "10]"),
            "top_cand": ("[1", None), "soft_reward": ("[0", None), "lm_weight": ("[0", None),
            "top_p": ("[0", "1]"), "beam_per_length": ("[1", None)},
    architecture=("upsample", "upsample_base", "max_vertices", "links", "vertex_inputs"),
    validate=validate, output_metrics=output_metrics, sweep=("decode_upsample", "U"),
    reads=("eval.length_cap_min", "eval.length_cap_ratio", "eval.sampling", "eval.no_repeat_ngram",
           "eval.no_consecutive_repeat"),
    conventions=("absent_tokens", "source_bos"))
