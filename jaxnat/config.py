"""Run configuration: Python config files returning an `ml_collections.ConfigDict`, command-line overrides
(`--config.a.b=value`) and validation.

Every problem is a `ConfigError` with one line naming the key (and, for an unknown key, the nearest valid
one), raised before anything is trained.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os

import ml_collections

from jaxnat import models
from jaxnat.errors import ConfigError, JaxnatError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

# key -> allowed values, for the string-valued switches of the shared sections (each family declares its own).
CHOICES = {
    "model.positions": ("sinusoidal", "learned"),
    "model.dtype": ("float32", "bfloat16"),
    "model.activation": ("relu", "gelu", "gelu_tanh", "swish"),
    "model.decoder_norm": ("", "pre", "post"),
    "model.decoder_autoreg": ("self_attention", "ssru", "aan"),
    "model.position_layout": ("fairseq", "marian"),
    "model.decoder_start": ("bos", "eos", "pad"),
    "data.source": ("synthetic", "text", "tfds"),
    "data.spm_model_type": ("unigram", "bpe"),
    "train.lr_schedule": ("inverse_sqrt", "linear", "cosine", "constant", "plateau"),
    "train.prng_impl": ("threefry2x32", "rbg", "unsafe_rbg"),
    "eval.constraint_order": ("any", "given"),
    "eval.search_rules": ("jaxnat", "fairseq"),
    "eval.params": ("best", "averaged"),
    "eval.average_of": ("last", "best"),
    "eval.mbr": ("", "chrf", "bleu"),  # (jaxnat.decoding.mbr.UTILITIES)
    "eval.alignment": ("", "words", "pieces", "soft"),  # (jaxnat.decoding.alignment.KINDS)
}


# the upper bound of an int key without one of its own: a length or count past it overflows jax's int32 (in a
# traceback, after training)
INT32_MAX = 2**31 - 1

# key -> (low, high) for numeric values: "(0" / "[0" / "1)" / "1]" say whether a bound is open or closed;
# None = unbounded (an int: up to INT32_MAX). (Each family declares the ranges of its own section.)
RANGES = {
    **{k: ("(0", None) for k in (
        "model.d_model", "model.num_heads", "model.ffn_dim", "model.enc_layers", "model.dec_layers",
        "model.max_len", "model.ln_eps", "data.max_len", "data.batch_tokens", "data.vocab_size", "data.bucket_multiple",
        "data.synthetic_train", "data.synthetic_valid", "data.synthetic_test", "train.lr",
        "train.adam_eps", "train.log_every", "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
        "train.keep_best", "train.valid_bleu_sentences",  # (the best checkpoints are those of the best valid BLEU)
        "train.microbatches",
        "train.max_bad_steps", "eval.beam_size", "eval.batch_size", "eval.throughput_batch",
        "eval.length_cap_ratio", "eval.valid_beam_size", "data.max_pairs", "data.max_pair_pieces", "eval.nbest")},
    **{k: ("[0", "1)") for k in (
        "model.dropout", "model.attention_dropout", "model.activation_dropout", "train.label_smoothing",
        "train.adam_b1", "train.adam_b2")},
    **{k: ("[0", None) for k in (
        "train.warmup_steps", "train.warmup_init_lr", "train.min_lr", "train.weight_decay", "train.clip_norm",
        "train.peak_tflops", "model.position_offset", "eval.max_len_a", "eval.max_len_b", "train.alignment_lambda",
        "eval.latency_sentences", "eval.length_cap_min", "eval.trace_sentences", "eval.average_checkpoints")},
    "data.bucket_growth": ("(1", None),  # each bucket about this times the last (`bucket_lengths` needs > 1)
    "train.steps": ("(0", f"{INT32_MAX}]"),  # the step counter is an int32
    # SentencePiece's seed is a uint32, and jax's keys of seed and seed + 1 take 32 bits (2**32 is key 0 again)
    "train.seed": ("[0", "4294967294]"),
    "eval.length_penalty": ("[0", "10]"),  # an exponent of the output's length: 1024^10 still fits a float32
    "train.plateau_factor": ("(0", "1)"), "train.plateau_patience": ("[1", None), "train.stop_patience": ("[0", None),
    "train.xla_gpu_autotune_level": ("[-1", "4]"),
    "eval.temperature": ("(0", None), "eval.top_k": ("[0", None), "eval.top_p": ("(0", "1]"),
    "eval.no_repeat_ngram": ("[0", None), "eval.no_consecutive_repeat": ("[0", None),
    "eval.epsilon": ("[0", "1)"), "eval.sample_seed": ("[0", "4294967294]"),
    "data.synthetic_lexicon": ("(0", "1]"), "data.synthetic_synonyms": ("[0", "1]"),
}


def _in_range(value, low: str | None, high: str | None) -> bool:
    if not math.isfinite(value):  # nan, and inf, which no key means: an exponent of inf overflows every score
        return False
    if low is not None and not (value > float(low[1:]) if low[0] == "(" else value >= float(low[1:])):
        return False
    return high is None or (value < float(high[:-1]) if high[-1] == ")" else value <= float(high[:-1]))


def _range_text(low: str | None, high: str | None) -> str:
    if low is None and high is None:  # any finite number (`_in_range`): the caller says "finite"
        return ""
    if high is None:
        return "positive" if low == "(0" else f">= {low[1:]}" if low[0] == "[" else f"> {low[1:]}"
    return f"in {low}, {high}"


def default_config() -> ml_collections.ConfigDict:
    """Every key a run understands, with defaults; config files start from this and change what they need.

    The shared sections (model, data, train, eval) hold what every model family means alike; each family's own
    keys are in its section, `config.<model.name>` (`jaxnat.models.family.Family.defaults`)."""
    c = ml_collections.ConfigDict()
    c.model = dict(
        name=models.DEFAULT, d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, pre_norm=False,
        embed_dropout=-1.0,  # dropout on the embedded inputs; -1 = model.dropout (one rate, as fairseq and the papers)
        positions="sinusoidal", max_len=256, share_embeddings=True, tie_output=True, bert_init=False,
        # token embeddings × √d_model in the input (fairseq's default; false: fairseq's --no-scale-embedding);
        # with share_embeddings, the decoder's own position table (fairseq's) or the encoder's
        scale_embeddings=True, separate_positions=False,
        dtype="float32",
        # the encoder's and decoder's layer stacks as one nn.scan each: one compiled layer body, whatever the depth
        # (parameters stacked along a leading layer axis; transformer.stack_layers converts a per-layer tree)
        scan_layers=False,
        # conventions of a model trained elsewhere, which `--mode import` sets (docs/import.md); the defaults are
        # jaxnat's own: layer norms' epsilon; the feed-forward activation; the decoder's residual layout ("" as
        # pre_norm, "pre", "post") and a pre-norm decoder's final norm; a layer norm over each stack's embedded
        # inputs; the first row and the frequencies of the sinusoidal table; a bias over the output vocabulary;
        # the token an autoregressive decoder starts from; whether sources begin with BOS; reserved tokens the
        # vocabulary lacks; reserved tokens read as <unk> (fairseq's translation_lev models mask and place with it)
        ln_eps=1e-6, activation="relu", decoder_norm="", decoder_final_norm=True, layernorm_embedding=False,
        position_offset=0, position_layout="fairseq", output_bias=False, decoder_start="bos", source_bos=True,
        absent_tokens="", unk_inputs="",
        # what a left-to-right decoder's layers read of the tokens before: self-attention, or one state vector a layer:
        # Marian's SSRU (Kim et al. 2019; its transformer-decoder-autoreg: rnn with dec-cell: ssru) or average
        # attention ("aan": Zhang et al. 2018; its transformer-decoder-autoreg: average-attention)
        decoder_autoreg="self_attention",
        # a left-to-right model's word alignments (eval.alignment, `jaxnat.decoding.alignment`): the cross-attention
        # of this decoder layer (0-based; -1: the last), averaged over its first alignment_heads heads (0: all), of a
        # decoder pass with the causal mask or, with full_context_alignment, without it (fairseq's transformer_align:
        # --alignment-layer, --alignment-heads, --full-context-alignment; Garg et al. 2019)
        alignment_layer=-1, alignment_heads=0, full_context_alignment=False,
    )
    c.data = dict(
        source="synthetic",  # synthetic | text | tfds
        dir="", src_lang="en", tgt_lang="de",
        # a multilingual model's language tokens (an imported NLLB model's "eng_Latn", "deu_Latn"): each source
        # starts with the first, each output with the second (a translate request's "src_lang"/"tgt_lang" instead)
        src_lang_token="", tgt_lang_token="",
        train_split="train", valid_split="valid", test_splits="test",  # test_splits: comma-separated
        synthetic_seed=0, synthetic_train=40000, synthetic_valid=500, synthetic_test=500,
        # the synthetic corpus's sentence kinds, e.g. "simple,question" or "simple:3,question:1"; "" = all
        synthetic_kinds="",
        synthetic_lexicon=1.0,  # the share of each of its word lists drawn from (e.g. 0.4: a quicker demo)
        synthetic_multimodal=True,  # False: no free target choices (one valid translation per source)
        synthetic_synonyms=0.0,  # the share of nouns with a second, freely chosen target stem
        tfds_name="", tfds_data_dir="",
        vocab_size=8000, joint_vocab=True, spm_model_type="unigram",
        # characters unseen in training become UTF-8 byte pieces, not UNK: any text (emoji, CJK, a term in a
        # hard constraint) is translated as given. Needs vocab_size > 256 + the corpus's characters.
        byte_fallback=True,
        max_len=128, truncate=False,  # pairs longer than max_len tokens (BOS/EOS included) are dropped or cut
        batch_tokens=4096,  # padded tokens per batch and side
        # bucket lengths: multiples of 4 growing ~1.2x (fewer: less compiling, more padding)
        bucket_growth=1.2, bucket_multiple=4,
        # training that does not pack (the edit models, init_lang, pack=false) buckets its batches to at most this
        # many lengths (multiples of bucket_multiple), fitted to the training pairs to pad the fewest tokens:
        # one compiled train program each. 0: the geometric lengths above, which validation and decoding keep
        max_buckets=3,
        # sequence packing: several pairs a training row of max_len tokens, no attention across them, one batch
        # shape (one compiled train program). Taken by the models whose losses stay exact per pair (docs/training.md);
        # the others train on the buckets above, as does every model with pack=false
        pack=True,
        init_lang="",  # e.g. "mt": refining models train (and evaluate) from {split}.mt[.gz], initial hypotheses y0
        # a trained workdir whose SentencePiece models this run uses instead of training its own (copied into
        # this workdir at the start): one vocabulary with a model that rescores this one's outputs. The keys that
        # would shape a vocabulary of its own must be that run's (`VOCABULARY_KEYS`)
        spm_from="",
        # a directory of {split}.pairs.jsonl constraint pairs (python -m jaxnat.data.alignment writes them) for
        # models that read pairs (vectorized constraints), and the fixed shape they take: at most max_pairs pairs
        # a sentence, each phrase at most max_pair_pieces pieces (a pair with a longer phrase is left out)
        pairs_dir="", max_pairs=3, max_pair_pieces=8,
        # guided alignment (train.alignment_lambda): a directory of {split}.align word alignments, Pharaoh links over
        # Moses words (python -m jaxnat.data.alignment writes them), of the train split (and of valid, if there)
        alignments_dir="",
    )
    c.train = dict(
        steps=100000, lr=5e-4, warmup_steps=4000, warmup_init_lr=1e-7,
        # after the warm-up: "inverse_sqrt" (fairseq's, the papers') or "linear" decay to 0 at train.steps (for
        # short runs, which end on a small learning rate instead of a large one), "cosine" (half a cosine down to
        # min_lr at train.steps: fairseq's cosine scheduler as the vectorized-constraints authors run stage 2),
        # "constant" (a fine-tuning phase) or "plateau" (constant, times a scale lowered on validation plateaus)
        lr_schedule="inverse_sqrt", min_lr=0.0,
        # plateau: the scale is multiplied by plateau_factor whenever plateau_patience validations in a row bring no
        # new best validation perplexity (Xu & Carpuat 2021, §4.1: 0.7 after 4; docs/training.md)
        plateau_factor=0.7,
        plateau_patience=4,  # validations in a row without a new best perplexity before each plateau_factor
        stop_patience=0,  # the run stops after this many validations in a row without a new best perplexity; 0: off
        adam_b1=0.9, adam_b2=0.98, adam_eps=1e-8, weight_decay=0.0, clip_norm=0.0,  # clip_norm 0: off
        label_smoothing=0.1, seed=0,
        # guided alignment (Garg et al. 2019): the weight of a loss that trains the attention word alignments read
        # (model.alignment_layer, alignment_heads, full_context_alignment) to follow data.alignments_dir's links
        # (0: off; the paper's 0.05)
        alignment_lambda=0.0,
        # each batch cut into this many row chunks whose gradients one scan adds up: one update of the same batch
        # with a k-th of the activations alive at a time (a model too large for the device's memory at its
        # batch; on a CPU, activations that stay in cache: DA-Transformer's graphs of λ x the source)
        microbatches=1,
        # keep_checkpoints: the newest training states kept; keep_best: the parameters of the best validations
        # kept (more than one for averaging the best N: eval.average_of=best)
        log_every=100, eval_every=2000, checkpoint_every=1000, keep_checkpoints=3, keep_best=1,
        max_bad_steps=5,  # consecutive non-finite steps before the run stops
        # the device's peak TFLOP/s that the log's MFU is a share of; 0: measured at the start (a large matmul in
        # model.dtype, about a second)
        peak_tflops=0.0,
        # XLA's GPU autotuner (--xla_gpu_autotune_level: 0 off … 4 XLA's default): it times candidate kernels for
        # every matmul and fusion while compiling, minutes on a large model; -1 leaves XLA_FLAGS as it is.
        # Set before the first computation, so it takes effect from the command line, not from a notebook
        # that already ran one
        xla_gpu_autotune_level=-1,
        # how every random key of the run is drawn (initialisation, dropout, the families' noise and roll-in):
        # jax's threefry2x32, or XLA's RngBitGenerator ("rbg"; "unsafe_rbg" splits keys with it too). Other
        # streams of the same distributions; rbg compiles the train step faster, and on a CPU runs it slower
        # (docs/benchmarks.md, "Random bits")
        prng_impl="threefry2x32",
        valid_bleu_sentences=1000,  # sentences of the valid split decoded for validation BLEU
        # draw curves.png at the end of training (false: matplotlib's import and drawing, about a second, are left
        # to `--mode curves`, which draws it from history.jsonl whenever asked)
        plot_curves=True,
        # a trained workdir whose best parameters start this run (fresh optimizer; its vocabulary is used): a
        # fine-tuning phase, or the second stage of a model that extends the one trained there (`Family.extends`:
        # its new parameters start from their initialisation). Ignored once this run has a checkpoint of its own
        init_from="",
    )
    c.eval = dict(
        beam_size=4, length_penalty=1.0, max_len_a=1.2, max_len_b=10, batch_size=64,
        valid_beam_size=1,  # beam used for periodic validation BLEU (greedy is faster)
        # --mode translate: with N > 1, each output line also lists the sentence's N best outputs of its beam search
        # (at most eval.beam_size; models that keep several outputs: `Supports.nbest`)
        nbest=1,
        # the left-to-right models: every decoding of the run (translate, eval, distill, validation) draws
        # eval.beam_size samples a sentence in place of the search, and outputs the best-scoring one (`Sampling`): the
        # distribution divided by the temperature, cut to its top_k tokens (0: all), to the most probable ones
        # reaching top_p, and to those of probability >= epsilon (0: none cut); seeded by sample_seed
        sampling=False, temperature=1.0, top_k=0, top_p=1.0, epsilon=0.0, sample_seed=0,
        # decoding (the searches and samples of the left-to-right models; the decoders of other families that take
        # them, their docs): no_repeat_ngram n > 0 never generates a token that would repeat an n-gram of its output
        # (fairseq's --no-repeat-ngram-size); no_consecutive_repeat k > 0 never one equal to the token before it, nor
        # one that makes the last m tokens repeat the m before them, m <= k ("a b a" + "b"; the DA-Transformer
        # authors' decode_no_consecutive_repeated_ngram); `jaxnat.decoding.repeats`; 0: off
        no_repeat_ngram=0, no_consecutive_repeat=0,
        # translate and eval: each sentence's output is, of the eval.beam_size outputs of its beam (or its samples),
        # the one the others agree with most by this utility (minimum Bayes risk decoding, `jaxnat.decoding.mbr`):
        # '' (off), chrf or bleu (sentence BLEU, what a BLEU table rewards)
        mbr="",
        # decoding (translate, eval, distill, score): a comma list of other trained workdirs of this model family and
        # vocabulary (any architecture), decoded together with this one as an ensemble (the mean of their
        # probabilities at each step; models that take it: `Supports.ensemble`); each decodes with the parameters
        # eval.params chooses
        ensemble="",
        # decoding: an n-gram language model of target pieces (an ARPA file, plain or .gz: KenLM's lmplz, or
        # --mode lm) whose score the beam search adds (shallow fusion; models that take it: `Supports.lm`, each
        # with a weight in its own section: docs/language_models.md); '' (off)
        lm="",
        # --mode lm: the order of the n-gram model it estimates from the training targets
        lm_order=4,
        # --mode score: also each piece's log-probability ("pieces", "token_logp"; the left-to-right models)
        token_scores=False,
        # translate and score: also each output's alignment to its source, read off the attention (the left-to-right
        # models, `jaxnat.decoding.alignment`): '' (none), words (Pharaoh pairs of whitespace words), pieces
        # (fairseq's --print-alignment hard) or soft (fairseq's --print-alignment soft)
        alignment="",
        # translate and eval (row <split>+glossary): a glossary, lines of a source term, a tab and its target term;
        # each sentence's terms found in its source become its constraints (`jaxnat.decoding.glossary`), hard
        # (guaranteed) with glossary_hard, and a model of constraint pairs reads them as its pairs;
        # glossary_ignore_case matches terms in any case
        glossary="", glossary_hard=True, glossary_ignore_case=False,
        latency_sentences=100, throughput_batch=64,
        # the parameters decoded: "best" (best validation BLEU), or "averaged" (written by --mode average).
        # average_checkpoints N > 0 decodes instead the mean of N checkpoints: the newest N training states
        # (average_of="last") or the N best validations (average_of="best"; train.keep_best must be >= N)
        params="best", average_checkpoints=0, average_of="last",
        # models that refine a fixed-capacity canvas: at most max(length_cap_min, length_cap_ratio × source
        # length) tokens; run_all_iterations: every refinement pass, not stopping at one that changes nothing
        length_cap_min=10, length_cap_ratio=2.0, run_all_iterations=False,
        trace_sentences=0,  # refining models: after evaluation, write trace.html with this many sentences' edits
        constraints="",  # comma list of soft,hard: also evaluate each test split with a constraint set (§12)
        constraint_seed=1,
        # refining models: also decode each test split from other starting sequences (`jaxnat.evaluation.
        # diagnostic`): the constraints in reference order, every second reference word, the model's own output,
        # the reference
        diagnostic=True,
        # hard constraint phrases met in any order or the given one (constrained beam search: VDBA's trie or
        # ordered DBA)
        constraint_order="any",
        # the left-to-right searches' rules: jaxnat's (exact beam search; BOS never generated) or fairseq's
        # SequenceGenerator's (an imported fairseq model then decodes as fairseq does, token for token: docs/import.md)
        search_rules="jaxnat",
        # whether a left-to-right search may write the unknown piece (false: UNK barred from every output, its
        # log-probability still in the others' softmax: Marian's --allow-unk off, which a Marian .npz import sets)
        allow_unk=True,
        # also decode the first test split at each of these decoding depths, e.g. "1,2,5,10" (BLEU, RIBES,
        # repetition rate and time per depth): the decoding depth of a family that has one (`Family.sweep`, e.g.
        # refinement passes or iterations of a layer)
        iteration_sweep="",
        # with iteration_sweep (else at the configured depth), also decode with an oracle taking some steps'
        # actions against the reference: a comma list of the model's oracle modes (Gu et al. 2019's model: deletion,
        # deletion_placeholder; their Figure 5), rows <split>+<label><depth>_oracle_<mode>
        oracle="",
        # also decode the first test split with exactly k reference words as constraints for each k of this comma
        # list (e.g. "0,1,2,4,6,8,10"), in each mode of eval.constraints: BLEU and CPR against the number of
        # constraints (Xu & Carpuat 2021, Figure 5), rows <split>+<mode>_c<k>
        constraint_counts="",
        # also a case-insensitive tokenized BLEU (tok_bleu_lc, multi-bleu.perl -lc, as some papers score En-Ro)
        # and RIBES on lowercased tokens; sacreBLEU's headline BLEU stays cased
        lowercase=False,
        # with data.pairs_dir, keep of each test sentence's pairs only those whose target phrase the model's plain
        # output does not already contain (the vectorized-constraints authors' test-set extraction)
        pairs_unproduced=False,
        # sacreBLEU's tokenizer of BLEU (and of the repetition rate): "" = sacreBLEU's own for data.tgt_lang (zh:
        # characters, ja/ko: MeCab's words, pip install 'jaxnat[ja]' or '[ko]'; else 13a), or one named: 13a, intl,
        # char, zh, ja-mecab, ko-mecab, none
        bleu_tokenize="",
    )
    for name in models.names():  # each family's own keys: its section (none for a family without any)
        if defaults := models.family_of(name).defaults():
            c[name] = defaults
    return c


def load_config(path: str) -> ml_collections.ConfigDict:
    """Executes a config file and returns its `get_config()`; a run's `config.json` (a workdir's, or an imported
    model's) is read as data instead: its values over the defaults (`workdir_config`)."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path} is a directory" if os.path.isdir(path) else
                          f"config file not found: {path}")
    if path.endswith(".json"):
        return workdir_config(os.path.dirname(path) or ".") if os.path.basename(path) == "config.json" else \
            _json_config(path)
    spec = importlib.util.spec_from_file_location("_jaxnat_config", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # a user's file: report, don't dump a traceback
        raise ConfigError(f"config file {path} failed to load: {type(e).__name__}: {e}") from e
    if not hasattr(module, "get_config"):
        raise ConfigError(f"config file {path} defines no get_config()")
    try:
        config = module.get_config()
    except Exception as e:  # reported like a file that fails to load
        raise ConfigError(f"get_config() in {path} failed: {type(e).__name__}: {e}") from e
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(f"get_config() in {path} must return an ml_collections.ConfigDict")
    return config


def for_one_gpu(config: ml_collections.ConfigDict, scan_layers: bool = False) -> ml_collections.ConfigDict:
    """``config`` (a CPU-sized Multi30k config) resized for one GPU, in place: the papers' base model (d 512, 6+6
    layers, 8 heads, FFN 2048), bf16 compute, packed batches of 16k tokens a side (docs/training.md), evaluation
    in batches of 128. The budgets (steps, schedule) stay the config's. ``scan_layers``: each layer stack one
    `nn.scan`: the train program compiles in a quarter (a model that runs its decoder once per head) to two
    thirds of the time (docs/benchmarks.md, "Compile time per family")."""
    config.model.update(d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dtype="bfloat16",
                        scan_layers=scan_layers)
    # decoding compiles one program per length bucket: four buckets (16, 32, 64, max_len), not a dozen
    config.data.update(pack=True, batch_tokens=16384, bucket_growth=2.0, bucket_multiple=16)
    config.eval.update(batch_size=128, throughput_batch=128)
    return config


def leaf_keys(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """Dotted names of every leaf, e.g. ['data.dir', 'model.d_model', ...]."""
    keys = []
    for name, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            keys += leaf_keys(value, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def _parse_value(key: str, text: str, current):
    """Parses `text` into the type of the current value of `key`."""
    kind = type(current)
    try:
        if kind is bool:
            low = text.lower()
            if low in _TRUE | _FALSE:
                return low in _TRUE
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is str:
            return text
        if current is None:
            return text
    except ValueError:
        pass
    else:
        raise ConfigError(f"config key {key} holds a {kind.__name__}; it cannot be overridden from the command line")
    raise ConfigError(f"bad value for {key}: {text!r} is not a {kind.__name__}")


def _hint(key: str, known: list[str]) -> str:
    """What an unknown key may have meant: where a family's key of before the sections went (`Family.moved`); the
    sections, for an unknown one; another section holding a key of that name (another family's, which would
    configure another model); the nearest key of its section, or a near one of another; else its section's keys."""
    moved = [f"{f.name}.{f.moved[key]}" for f in map(models.family_of, models.names()) if key in f.moved]
    if moved:
        return f"; it moved to the model family's section: {' or '.join(moved)}"
    section, _, name = key.rpartition(".")
    ours = [k for k in known if k.rpartition(".")[0] == section]
    if section and not ours:
        sections = dict.fromkeys(k.rpartition(".")[0] for k in known)
        return f"; {section} is not a section (the sections: {', '.join(sections)})"
    if not section:
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.0)
        return f"; did you mean {near[0]}?" if near else ""
    keys = ", ".join(k.rpartition(".")[2] for k in ours)
    elsewhere = [k.rpartition(".")[0] for k in known if k.rpartition(".")[2] == name]
    if elsewhere:  # another family's key of that name would configure another model
        return f"; {name} is a key of the {' and '.join(elsewhere)} section; {section}'s keys: {keys}"
    near = difflib.get_close_matches(name, [k.rpartition(".")[2] for k in ours], n=1, cutoff=0.6)
    if near:
        return f"; did you mean {section}.{near[0]}?"
    near = difflib.get_close_matches(key, [k for k in known if k not in ours], n=1, cutoff=0.8)
    return f"; did you mean {near[0]}?" if near else f"; {section}'s keys: {keys}"


def apply_override(config: ml_collections.ConfigDict, key: str, text: str) -> None:
    """Sets `config.<key>` from its command-line text, with the type of the existing value."""
    keys = leaf_keys(config)
    if key not in keys:
        raise ConfigError(f"unknown config key {key}{_hint(key, keys)}")
    *parents, leaf = key.split(".")
    node = config
    for p in parents:
        node = node[p]
    node[leaf] = _parse_value(key, text, node[leaf])


def parse_overrides(args: list[str]) -> list[tuple[str, str]]:
    """['--config.a.b=1', '--config.c', '2'] -> [('a.b', '1'), ('c', '2')]; anything else is an error."""
    pairs, i = [], 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--config."):
            raise ConfigError(f"unrecognised argument {arg} (overrides look like --config.train.steps=100)")
        body = arg[len("--config."):]
        if "=" in body:
            key, value = body.split("=", 1)
        elif i + 1 < len(args):
            key, value = body, args[i + 1]
            i += 1
        else:
            raise ConfigError(f"override {arg} has no value")
        pairs.append((key, value))
        i += 1
    return pairs


def _check_values(config: ml_collections.ConfigDict, choices: dict, ranges: dict) -> None:
    """The choices and ranges of dotted keys (`CHOICES`, `RANGES`)."""
    for key, allowed in choices.items():
        section, name = key.split(".")
        if section in config and name in config[section] and config[section][name] not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(v or repr(v) for v in allowed)}, not "
                              f"{config[section][name]!r}")
    for key, (low, high) in ranges.items():
        section, name = key.split(".")
        if section not in config or name not in config[section]:
            continue
        value = config[section][name]
        if not _in_range(value, low, high):
            finite = "a finite number " if not math.isfinite(value) else ""
            raise ConfigError(f"{key} must be {(finite + _range_text(low, high)).strip()}, got {value}")
        if high is None and type(value) is int and value > INT32_MAX:
            raise ConfigError(f"{key} must be at most {INT32_MAX} (an int32 on the device), got {value}")


# key -> (the key it acts with, what that one is set to): set away from its default while that key is off (0,
# empty), it would do nothing
SWITCHED = {"eval.average_of": ("eval.average_checkpoints", "N"), "data.max_pairs": ("data.pairs_dir", "DIR"),
            "data.max_pair_pieces": ("data.pairs_dir", "DIR"), "eval.pairs_unproduced": ("data.pairs_dir", "DIR"),
            "eval.glossary_hard": ("eval.glossary", "FILE"), "eval.glossary_ignore_case": ("eval.glossary", "FILE"),
            "train.alignment_lambda": ("data.alignments_dir", "DIR"), "data.alignments_dir": ("train.alignment_lambda",
                                                                                             "0.05"),
            **{f"eval.{k}": ("eval.sampling", "true") for k in ("temperature", "top_k", "top_p", "epsilon",
                                                                 "sample_seed")}}


def check_switched(config: ml_collections.ConfigDict, switched: dict[str, tuple[str, str]]) -> None:
    """A one-line `ConfigError` naming the keys of ``switched`` ({flat key: (flat key of its switch, a value to
    set the switch to)}) set away from their defaults while their switch is off (false, 0, empty): they act only with
    it on, and the run would train or decode as without them, without a word."""
    defaults = default_config()
    off = {}
    for key, (switch, wanted) in switched.items():
        if _leaf(config, key) != _leaf(defaults, key) and not _leaf(config, switch):
            off.setdefault((switch, wanted), []).append(key)
    for (switch, wanted), keys in off.items():
        named = ", ".join(f"{k}={_shown(_leaf(config, k))}" for k in keys)
        back = " ".join(f"--config.{k}={_shown(_leaf(defaults, k))}" for k in keys)
        is_off = _leaf(config, switch)
        raise ConfigError(f"{named} {'acts' if len(keys) == 1 else 'act'} only with {switch} set, and {switch} is "
                          f"{_shown(is_off) if isinstance(is_off, bool) else repr(is_off)}: set "
                          f"--config.{switch}={wanted}, or {back}")


# Keys of the shared sections that only some model families read: each family lists those its runs read in
# `Family.reads`; set away from its default for a family that does not, the run would be as without it
READ_BY_SOME = ("eval.length_penalty", "eval.max_len_a", "eval.max_len_b", "eval.length_cap_min",
                "eval.length_cap_ratio", "eval.run_all_iterations", "eval.search_rules", "eval.allow_unk", "data.pack",
                "eval.sampling", "eval.no_repeat_ngram", "eval.no_consecutive_repeat",
                "train.alignment_lambda", "data.alignments_dir")


def check_read(config: ml_collections.ConfigDict, family) -> None:
    """A one-line `ConfigError` for a key of `READ_BY_SOME` set away from its default (the family's own,
    `Family.shared`, or the shared one) for a ``family`` that does not read it (`Family.reads`), and for
    data.max_buckets, which shapes the batches of training that does not pack, with a family that packs."""
    if unknown := [key for key in family.reads if key not in READ_BY_SOME]:
        raise ConfigError(f"model family {family.name!r}: its reads names {', '.join(unknown)}, not a key of "
                          f"jaxnat.config.READ_BY_SOME")
    shared = default_config()
    for key in READ_BY_SOME:
        value, default = _leaf(config, key), family.shared.get(key, _leaf(shared, key))
        if key not in family.reads and value != default:
            readers = [name for name in models.names() if key in models.family_of(name).reads]
            raise ConfigError(f"{key}={_shown(value)} is not read by model {family.name!r} (only by: "
                              f"{', '.join(readers) or 'none'}): the run would be as without it; leave it at its "
                              f"default, --config.{key}={_shown(default)}")
    buckets = shared.data.max_buckets
    if "data.pack" in family.reads and config.data.pack and config.data.max_buckets != buckets:
        raise ConfigError(f"data.max_buckets={config.data.max_buckets} shapes the batches of training that does not "
                          f"pack, and model {family.name!r} packs with data.pack=true: set --config.data.pack=false, "
                          f"or leave data.max_buckets at {buckets}")


def _shown(value) -> str:
    """A value as the command line writes it (booleans in lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_other_sections(config: ml_collections.ConfigDict, read: set[str]) -> None:
    """A section of a family this run does not use keeps its defaults: a value set there would do nothing."""
    for name in models.names():
        if name in read or name not in config:
            continue
        defaults = models.family_of(name).defaults()
        for key, value in config[name].items():
            if key in defaults and value != defaults[key]:
                raise ConfigError(f"{name}.{key} is set, but model.name is {config.model.name!r}: the {name} section "
                                  f"configures model.name={name}")


def validate(config: ml_collections.ConfigDict) -> None:
    """Checks values that a type check cannot: choices, positivity, divisibility; then the model family's own
    checks (`Family.validate`)."""
    m, d = config.model, config.data
    if m.name not in models.names():
        raise ConfigError(f"model.name must be one of {', '.join(models.names())}, not {m.name!r}")
    lineage = models.lineage(m.name)
    _check_values(config, CHOICES, RANGES)
    for family in lineage:
        _check_values(config, {f"{family.name}.{k}": v for k, v in family.choices.items()},
                      {f"{family.name}.{k}": v for k, v in family.ranges.items()})
    t = config.train
    if m.d_model % m.num_heads:
        raise ConfigError(f"model.d_model ({m.d_model}) must be divisible by model.num_heads ({m.num_heads})")
    if t.lr_schedule in ("linear", "cosine") and t.warmup_steps >= t.steps:
        raise ConfigError(f"train.warmup_steps ({t.warmup_steps}) must be below train.steps ({t.steps}) with "
                          f"train.lr_schedule={t.lr_schedule}, which decays to its end at the last step")
    from jaxnat.models.family import MODEL_CONVENTIONS
    from jaxnat.models.transformer import absent_ids, unk_input_ids

    absent_ids(m.absent_tokens)
    unk_input_ids(m.unk_inputs)
    for key, default in MODEL_CONVENTIONS.items():
        if m[key] != default and key not in lineage[-1].conventions:
            raise ConfigError(f"model.{key}={m[key]!r} is not applied by model {m.name!r} (only by: "
                              f"{', '.join(n for n in models.names() if key in models.family_of(n).conventions)})")
    if m.embed_dropout != -1.0 and not 0.0 <= m.embed_dropout < 1.0:
        raise ConfigError(f"model.embed_dropout must be -1 (= model.dropout) or in [0, 1), got {m.embed_dropout}")
    if d.max_len > m.max_len:
        raise ConfigError(f"data.max_len ({d.max_len}) exceeds model.max_len ({m.max_len})")
    if not -m.dec_layers <= m.alignment_layer < m.dec_layers or not 0 <= m.alignment_heads <= m.num_heads:
        raise ConfigError(f"model.alignment_layer={m.alignment_layer} and model.alignment_heads={m.alignment_heads} "
                          f"name a decoder layer (0 to {m.dec_layers - 1}, or -1 the last, -2 the one before, …) and "
                          f"how many of its {m.num_heads} heads (0: all)")
    if type(d.max_buckets) is not int or d.max_buckets < 0:
        raise ConfigError(f"data.max_buckets must be an integer >= 0 (0: the geometric buckets of "
                          f"data.bucket_growth), got {d.max_buckets!r}")
    check_switched(config, SWITCHED)
    check_read(config, lineage[-1])
    from jaxnat.evaluation.metrics import check_bleu_tokenize_name

    check_bleu_tokenize_name(config.eval.bleu_tokenize)  # whether it can be had: where a run scores (MeCab)
    for family in lineage:
        check_switched(config, {f"{family.name}.{k}": (f"{family.name}.{switch}", "true")
                                for k, switch in family.switched.items()})
    if config.eval.params == "averaged" and config.eval.average_checkpoints:
        raise ConfigError(f"eval.params=averaged decodes the average --mode average wrote; eval.average_checkpoints="
                          f"{config.eval.average_checkpoints} averages checkpoints itself: set one of them")
    if d.batch_tokens < d.max_len:
        raise ConfigError(f"data.batch_tokens ({d.batch_tokens}) must be at least data.max_len ({d.max_len})")
    if t.microbatches > d.batch_tokens // d.max_len:  # a chunk is a row at least: the batch would outgrow its budget
        raise ConfigError(f"train.microbatches ({t.microbatches}) exceeds the rows of a batch of data.max_len tokens "
                          f"(data.batch_tokens {d.batch_tokens} // data.max_len {d.max_len} = "
                          f"{d.batch_tokens // d.max_len}): each chunk takes a row at least, so every batch would grow "
                          f"to {t.microbatches} rows, past data.batch_tokens; lower train.microbatches or raise "
                          f"data.batch_tokens")
    if m.share_embeddings and not d.joint_vocab:
        raise ConfigError("model.share_embeddings needs data.joint_vocab=true (one vocabulary for both sides)")
    modes = [mode for mode in config.eval.constraints.split(",") if mode]
    if any(mode not in ("soft", "hard") for mode in modes):
        raise ConfigError(f"eval.constraints is a comma list of soft,hard; got {config.eval.constraints!r}")
    from jaxnat.decoding.request import check_supported

    family = lineage[-1]
    sweep = [v.strip() for v in config.eval.iteration_sweep.split(",") if v.strip()]
    if sweep and (not all(v.isdigit() and int(v) >= 1 for v in sweep) or not family.sweep):
        sweeping = ", ".join(f"{f.name} ({f.name}.{f.sweep[0]})" for f in map(models.family_of, models.names())
                             if f.sweep)
        raise ConfigError(f"eval.iteration_sweep is a comma list of decoding depths (each >= 1) of a model that has "
                          f"one: {sweeping}; got {config.eval.iteration_sweep!r} with model.name={m.name!r}")
    try:  # what the evaluation will ask of the model, checked before anything is trained
        check_supported(m.name, family.supports, soft="soft" in modes, hard="hard" in modes,
                        trace=config.eval.trace_sentences > 0,
                        beam_size=max(config.eval.beam_size, config.eval.valid_beam_size), nbest=config.eval.nbest,
                        ensemble=bool(ensemble_members(config)), align=bool(config.eval.alignment),
                        lm=bool(config.eval.lm))
        for oracle in (v.strip() for v in config.eval.oracle.split(",") if v.strip()):
            check_supported(m.name, family.supports, oracle=oracle)
    except JaxnatError as e:
        raise ConfigError(f"{e} (asked by eval.constraints, eval.trace_sentences, eval.beam_size, "
                          f"eval.valid_beam_size, eval.nbest, eval.ensemble, eval.alignment, eval.lm or eval.oracle; "
                          f"oracle modes of {m.name!r}: {', '.join(family.supports.oracle) or 'none'})") from None
    if config.eval.glossary:
        takes = family.supports.pairs or (family.supports.hard_constraints if config.eval.glossary_hard
                                          else family.supports.soft_constraints)
        if not takes:
            kind = "hard" if config.eval.glossary_hard else "soft"
            hint = "; set eval.glossary_hard=true" if family.supports.hard_constraints else ""
            raise ConfigError(f"eval.glossary gives each sentence's terms as {kind} constraints, which model "
                              f"{m.name!r} does not take{hint}")
    # the constrained searches are searches: samples take no constraints, but a model's pairs (its inputs)
    barred = [mode for mode in ("soft", "hard") if mode in modes and not (mode == "soft" and family.supports.pairs)]
    if config.eval.sampling and barred:
        raise ConfigError(f"eval.sampling=true samples without constraints, and eval.constraints asks for "
                          f"{' and '.join(barred)} ones: leave eval.constraints without {' and '.join(barred)}, or "
                          f"eval.sampling=false")
    if config.eval.sampling and config.eval.lm:
        raise ConfigError("eval.lm is fused into a beam search, and eval.sampling=true samples in its place: leave out "
                          "one of them")
    if config.eval.mbr and (config.eval.beam_size < 2 or not family.supports.nbest):
        raise ConfigError(f"eval.mbr={config.eval.mbr} chooses among a sentence's outputs: it needs a model that keeps "
                          f"several (those of n-best lists) and eval.beam_size >= 2, here model {m.name!r} and beam "
                          f"size {config.eval.beam_size}")
    if config.eval.nbest > config.eval.beam_size:
        raise ConfigError(f"eval.nbest={config.eval.nbest} needs eval.beam_size >= {config.eval.nbest} (beam size "
                          f"{config.eval.beam_size}): the search keeps as many finished outputs as it has beams")
    if config.eval.constraint_order == "given" and family.supports.hard_constraints and not family.supports.given_order:
        raise ConfigError(f"eval.constraint_order=given: model {m.name!r} places hard constraints in any order "
                          f"(it does not read the setting); use eval.constraint_order=any")
    counts = [v.strip() for v in config.eval.constraint_counts.split(",") if v.strip()]
    if counts and not all(v.isdigit() for v in counts):
        raise ConfigError(f"eval.constraint_counts is a comma list of constraint-word counts (each >= 0), got "
                          f"{config.eval.constraint_counts!r}")
    if counts and not modes:
        raise ConfigError("eval.constraint_counts decodes in the modes of eval.constraints: set it too "
                          "(e.g. --config.eval.constraints=hard)")
    if family.supports.pairs and not d.pairs_dir:
        raise ConfigError(f"model {m.name!r} trains on constraint pairs: set data.pairs_dir (python -m "
                          f"jaxnat.data.alignment writes them; on the embedded corpus: data.pairs_dir=synthetic)")
    if d.source == "text" and not d.dir:
        raise ConfigError("data.source=text needs data.dir (a directory of {split}.{lang}[.gz] files): "
                          "--config.data.dir=DIR")
    if d.source == "synthetic" and d.dir:
        raise ConfigError(f"data.dir={d.dir!r} is not read with data.source=synthetic (the embedded corpus); "
                          f"to train on the files there: --config.data.source=text")
    _check_file_names(d)
    if d.init_lang:  # post-editing data: a third file per split, refined by the model from y0 = its line
        if not family.supports.init:
            refining = ", ".join(name for name in models.names() if models.family_of(name).supports.init)
            raise ConfigError(f"data.init_lang trains a refining model ({refining}) from initial hypotheses; "
                              f"model.name is {m.name!r}")
        if d.source != "text":
            raise ConfigError(f"data.init_lang needs data.source=text (the {{split}}.{d.init_lang} files are read "
                              f"from data.dir); data.source is {d.source!r}")
        if d.init_lang in (d.src_lang, d.tgt_lang):
            raise ConfigError(f"data.init_lang ({d.init_lang!r}) must differ from data.src_lang and data.tgt_lang: "
                              f"it names the initial-hypothesis files, e.g. 'mt' for train.mt")
    _check_other_sections(config, {family.name for family in lineage})
    for each in lineage:
        if each.validate is not None:
            each.validate(config)


def _check_file_names(d) -> None:
    """Split and language names become file names, {split}.{lang} in data.dir and hyps/{split}.txt in the
    workdir: one with a path separator would be looked up in another directory and fail only when the evaluation
    writes its hypotheses, after training."""
    names = [("data.src_lang", d.src_lang), ("data.tgt_lang", d.tgt_lang), ("data.init_lang", d.init_lang),
             ("data.train_split", d.train_split), ("data.valid_split", d.valid_split)]
    names += [("data.test_splits", name.strip()) for name in str(d.test_splits).split(",")]
    for key, name in names:
        if isinstance(name, str) and (name.strip() in (".", "..") or any(c in name for c in "/\\\0")):
            raise ConfigError(f"{key}={name!r}: a split or language name is part of a file name and may not hold a "
                              f"path separator or be '.' or '..' (put the files in data.dir itself)")


# The keys that shape a new SentencePiece vocabulary (`jaxnat.data.tokenizer.Tokenizer.train_or_load`): a run that
# takes another run's (data.spm_from) builds none, and they would do nothing there
VOCABULARY_KEYS = ("data.vocab_size", "data.joint_vocab", "data.spm_model_type", "data.byte_fallback")


# The keys that define a trained model's parameters, vocabulary and the meaning of its heads: a workdir is
# resumed, evaluated or translated only with the values it was trained with (and its family's
# `Family.architecture` keys, `model_keys`). Everything else (dropout, steps, learning rate, decoding settings)
# may change between runs on one workdir.
MODEL_KEYS = tuple(f"model.{k}" for k in (
    "name", "d_model", "ffn_dim", "num_heads", "enc_layers", "dec_layers", "pre_norm", "positions", "max_len",
    "share_embeddings", "scale_embeddings", "separate_positions", "tie_output", "scan_layers", "ln_eps", "activation",
    "decoder_norm", "decoder_final_norm", "layernorm_embedding", "position_offset", "position_layout", "output_bias",
    "decoder_start", "source_bos", "absent_tokens", "unk_inputs", "alignment_layer", "alignment_heads",
    "full_context_alignment", "decoder_autoreg")
) + VOCABULARY_KEYS


def check_vocabulary_from(config: ml_collections.ConfigDict, path: str) -> None:
    """A one-line `ConfigError` naming each `VOCABULARY_KEYS` value that differs from the one the run in ``path``
    (data.spm_from, whose vocabulary this run takes) built its vocabulary with: its config.json's (a key it lacks,
    added since, is not compared), the default where it has none. Set otherwise, the key would not act, and this
    run's config.json would record a vocabulary it does not have."""
    recorded, defaults = _read_recorded(path), default_config()
    differ = []
    for key in VOCABULARY_KEYS:
        value = _leaf(config, key)
        built = _leaf(defaults, key) if recorded is None else _recorded(recorded, key, default=value)
        if value != built:
            differ.append((key, value, built))
    if differ:
        named = ", ".join(f"{key}={value!r}" for key, value, _ in differ)
        wanted = " ".join(f"--config.{key}={_shown(built)}" for key, _, built in differ)
        raise ConfigError(f"{named}: data.spm_from={path} takes the vocabulary of that run, which builds none here, so "
                          f"{'it does' if len(differ) == 1 else 'they do'} nothing; set the values it was built with "
                          f"({wanted}), or leave data.spm_from empty for a vocabulary of this run's own")


def model_keys(name: str) -> tuple[str, ...]:
    """`MODEL_KEYS` and the architecture keys of model ``name``'s families."""
    return MODEL_KEYS + tuple(f"{f.name}.{k}" for f in models.lineage(name) for k in f.architecture)


# Keys added after runs were trained: such a run's config.json lacks the key, which there means what the code did
# before it existed (so that an older workdir is decoded as it was trained, and a config that asks for something
# else is refused): key -> (value, the switch that must be on in the run for the key to mean anything, or None).
# Each family declares its own (`Family.before_added`, `before_added` has them all).
BEFORE_ADDED = {"model.scale_embeddings": (True, None), "model.separate_positions": (False, None),
                **{f"model.{k}": (v, None) for k, v in dict(
                    ln_eps=1e-6, activation="relu", decoder_norm="", decoder_final_norm=True,
                    layernorm_embedding=False, position_offset=0, position_layout="fairseq", output_bias=False,
                    decoder_start="bos", source_bos=True, absent_tokens="", unk_inputs="", alignment_layer=-1,
                    alignment_heads=0, full_context_alignment=False, decoder_autoreg="self_attention").items()}}


def before_added() -> dict:
    """`BEFORE_ADDED` and every family's, with their section names."""
    out = dict(BEFORE_ADDED)
    for family in map(models.family_of, models.names()):
        for key, (value, switch) in family.before_added.items():
            out[f"{family.name}.{key}"] = (value, switch and f"{family.name}.{switch}")
    return out


_UNKNOWN = object()


def _recorded(recorded: dict, key: str, default=_UNKNOWN):
    """The value of ``key`` in a recorded config (`_sectioned`), its `BEFORE_ADDED` value when absent, else
    ``default`` (a key added since that means nothing in this run); KeyError without a default."""
    section, name = key.split(".")
    if name in recorded.get(section, {}):
        return recorded[section][name]
    value, switch = before_added().get(key, (default, None))
    if switch is not None:
        on, flag = switch.split(".")
        value = value if recorded.get(on, {}).get(flag) else default
    if value is _UNKNOWN:
        raise KeyError(key)
    return value


def _sectioned(recorded: dict) -> dict:
    """A recorded config.json in today's layout: one written before the family sections had each family's keys
    in the shared sections; they move to the run's family's section (`Family.moved`). The sections of the families
    the run did not read (their defaults then, meaningless in that run) are dropped, so that today's defaults
    stand there."""
    out = {section: dict(values) for section, values in recorded.items() if isinstance(values, dict)}
    name = out.get("model", {}).get("name")
    read = {f.name for f in models.lineage(name)} if name in models.names() else set()
    for family in map(models.family_of, models.names()):
        for old, new in family.moved.items():
            section, key = old.split(".")
            if key in recorded.get(section, {}):
                out[section].pop(key, None)
                if family.name in read and new not in out.get(family.name, {}):
                    out.setdefault(family.name, {})[new] = recorded[section][key]
    if read:  # the sections of the families the run never read held the defaults of its day, which may have moved
        for family in models.names():
            if family not in read:
                out.pop(family, None)
    return out


def _read_json_config(path: str) -> dict:
    """The config a JSON file records ({section: {key: value}}); a one-line ConfigError naming ``path`` where it
    is unreadable, not JSON (nested past Python's recursion limit too) or of another shape, whose sections
    `_sectioned` would drop without a word (the run's then read as jaxnat's defaults)."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise ConfigError(f"{path} is unreadable ({type(e).__name__}): not a config jaxnat wrote") from None
    sections = default_config().keys()
    if not isinstance(found, dict) or any(not isinstance(found[s], dict) for s in sections if s in found):
        raise ConfigError(f"{path} is not a config jaxnat wrote (a JSON object of sections, each an object of keys)")
    return found


def _read_recorded(workdir: str) -> dict | None:
    """``workdir/config.json`` in today's layout (`_sectioned`); None when there is none."""
    path = os.path.join(workdir, "config.json")
    if not os.path.lexists(path):  # (a directory or a broken link there is a damaged record)
        return None
    return _sectioned(_read_json_config(path))


def ensemble_members(config) -> list[str]:
    """The workdirs eval.ensemble names (its comma list, blanks dropped)."""
    return [path.strip() for path in config.eval.ensemble.split(",") if path.strip()]


def check_member(config: ml_collections.ConfigDict, path: str, workdir: str) -> ml_collections.ConfigDict:
    """The config of ``path``, a run eval.ensemble decodes with the one in ``workdir``: a run of this config's family
    and vocabulary (its architecture its own, as fairseq's ensembles of checkpoints over one dictionary), or a
    one-line error naming it: at load, and by the trainer before the first step (its final evaluation decodes with
    it)."""
    return check_aux("eval.ensemble", path, config.model.name, workdir)


def check_aux(key: str, path: str, family: str, workdir: str):
    """The config of the run in ``path`` (named by config ``key``) that the run in ``workdir`` decodes with, after
    checking it is a run of ``family`` with the same vocabulary (a one-line `JaxnatError` otherwise): by
    `jaxnat.restore.load_aux`, and by the trainer before the first step, so that a run is not refused after it."""
    from jaxnat.data.tokenizer import Tokenizer

    try:
        aux_config = workdir_config(path)
    except ConfigError as e:  # the line names the key that named the directory
        raise ConfigError(f"{key}={path}: {e}") from None
    if aux_config.model.name != family:
        raise JaxnatError(f"{key}={path} is a {aux_config.model.name!r} run; it must be a run of model {family!r}")
    if not Tokenizer.same_models(path, workdir):
        raise JaxnatError(f"{key}={path} has another vocabulary than {workdir}; train this run with "
                          f"--config.data.spm_from={path}")
    return aux_config


def check_matches_workdir(config: ml_collections.ConfigDict, workdir: str, ignore: tuple[str, ...] = (),
                          named_by: str = "--workdir") -> None:
    """Raises a one-line `ConfigError` naming every `model_keys` value (but ``ignore``) that differs from the one
    recorded in ``workdir/config.json`` (nothing to compare with: a new workdir). Keys the recorded config lacks
    (added to jaxnat after that run) are compared with their `BEFORE_ADDED` value, or not at all. ``named_by``:
    the option that named ``workdir`` (the message's advice: another of it)."""
    recorded = _read_recorded(workdir)
    if recorded is None:
        return
    differ = []
    try:  # a run of another model: the family sections it never read hold defaults, not what it trained
        trained_sections = {f.name for f in models.lineage(_recorded(recorded, "model.name"))}
    except (KeyError, ConfigError):
        trained_sections = None
    for key in (k for k in model_keys(config.model.name) if k not in ignore):
        section, name = key.split(".")
        if key not in MODEL_KEYS and trained_sections is not None and section not in trained_sections:
            continue
        try:
            trained = _recorded(recorded, key)
        except KeyError:
            continue
        if trained != config[section][name]:
            differ.append(f"{key}={config[section][name]!r} (trained: {trained!r})")
    if differ:
        raise ConfigError(f"the config does not match the run in {workdir}: {'; '.join(differ)}; use the config it "
                          f"was trained with, or another {named_by}")


def overlay(config: ml_collections.ConfigDict, recorded: dict) -> ml_collections.ConfigDict:
    """``config`` with the values of ``recorded`` (a config jaxnat wrote, in any version's layout: `_sectioned`)
    over it, in place; keys jaxnat no longer has are left out."""
    for section, values in _sectioned(recorded).items():
        if section in config:
            for k, v in values.items():
                if k in config[section]:
                    try:
                        config[section][k] = v
                    except TypeError:  # ml_collections' type check (8.5 for an int): one line, not a traceback
                        raise ConfigError(f"config key {section}.{k} is set to {_typed(v, config[section][k])}") \
                            from None
    return config


def _json_config(path: str) -> ml_collections.ConfigDict:
    return overlay(default_config(), _read_json_config(path))


def workdir_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a workdir was trained with (its config.json over the defaults, so keys added to jaxnat since
    are there with their defaults, or with the value they stand for in that run: `BEFORE_ADDED`; a config.json of
    before the family sections in today's layout: `_sectioned`). ConfigError when it has none."""
    try:
        recorded = _read_recorded(workdir)
    except ConfigError:
        recorded = None
    if recorded is None:
        raise ConfigError(f"{os.path.join(workdir, 'config.json')}: no readable config of a trained run")
    config = overlay(default_config(), recorded)
    for key in before_added():  # what the run did before the key existed, where the key means something
        section, name = key.split(".")
        if section in config:
            config[section][name] = _recorded(recorded, key, default=config[section][name])
    return config


def check_known_keys(config: ml_collections.ConfigDict, path: str) -> None:
    """A one-line `ConfigError` for the first key of ``config`` (loaded from ``path``) that jaxnat does not know,
    with the nearest one it does: ml_collections' ``update`` adds unknown keys without a word, so a misspelt key
    in a config file would otherwise train without its feature."""
    defaults = default_config()
    known = leaf_keys(defaults)
    for key in leaf_keys(config):
        if key not in known:
            raise ConfigError(f"{path} sets unknown config key {key}{_hint(key, known)}")
        # a section replaced by a plain dict escapes ml_collections' type check (8.5 steps, 'no' to pack)
        value, default = _leaf(config, key), _leaf(defaults, key)
        if not _same_type(value, default):
            raise ConfigError(f"{path} sets {key} to {_typed(value, default)}")


def _leaf(config: ml_collections.ConfigDict, key: str):
    for name in key.split("."):
        config = config[name]
    return config


def _typed(value, default) -> str:
    """'8.5, a float; it is an int': what a value of the wrong type is, and what its key holds."""
    def kind(x):
        name = type(x).__name__
        return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"
    return f"{value!r}, {kind(value)}; it is {kind(default)}"


def _same_type(value, default) -> bool:
    """Whether ``value`` may stand for a key whose default is ``default``: its type, or an int for a float."""
    return type(value) is type(default) or (type(default) is float and type(value) is int)


def family_defaults(config: ml_collections.ConfigDict, given=()) -> ml_collections.ConfigDict:
    """``config`` with its family's own defaults of shared keys (`Family.shared`, e.g. eval.beam_size=1 for a family
    without beam search), in place, wherever the key still holds the shared default and is not in ``given`` (the
    keys the command line set)."""
    if config.model.name not in models.names():
        return config  # validate says so
    shared = default_config()
    for key, value in models.family_of(config.model.name).shared.items():
        section, _, name = key.partition(".")
        if name not in shared.get(section, {}):
            raise ConfigError(f"model family {config.model.name!r}: its shared names {key!r}, not a key of the shared "
                              f"sections")
        if key not in given and config[section][name] == shared[section][name]:
            config[section][name] = value
    return config


def build_config(path: str, overrides: list[str]) -> ml_collections.ConfigDict:
    """Loads a config file, checks its keys, applies command-line overrides and its family's defaults
    (`family_defaults`) and validates the result."""
    config = load_config(path)
    check_known_keys(config, path)
    pairs = parse_overrides(overrides)
    for key, value in pairs:
        apply_override(config, key, value)
    family_defaults(config, {key for key, _ in pairs})
    validate(config)
    return config
