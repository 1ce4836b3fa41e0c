"""Run configuration: Python config files returning an `ml_collections.ConfigDict`, command-line overrides
(`--config.a.b=value`) and validation.

Every problem is a `ConfigError` with one line naming the key (and, for an unknown key, the nearest valid
one), raised before anything is trained.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os

import ml_collections

from jaxnat.errors import ConfigError, JaxnatError
from jaxnat.models import MODELS

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

# key -> allowed values, for the string-valued switches.
CHOICES = {
    "model.name": tuple(MODELS),
    "model.positions": ("sinusoidal", "learned"),
    "model.dtype": ("float32", "bfloat16"),
    "model.reposition_deletion": ("vector", "bos"),
    "data.source": ("synthetic", "text", "tfds"),
    "data.spm_model_type": ("unigram", "bpe"),
    "train.lr_schedule": ("inverse_sqrt", "linear", "cosine", "constant"),
    "model.length_prediction": ("token", "pooled"),
    "train.correction_count": ("bernoulli", "fixed"),
    "train.correction_combine": ("sum", "mean"),
    "eval.length_beam_mode": ("top", "centred"),
    "eval.constraint_order": ("any", "given"),
    "eval.candidate_score": ("probability", "log_probability"),
    "eval.update_all": ("auto", "true", "false"),
    "eval.pair_consume": ("auto", "true", "false"),
    "model.pair_output": ("eq11", "authors"),
    "model.pair_adapters": ("shared", "separate"),
    "train.pair_weighting": ("tokens", "span"),
    "eval.hard_mode": ("block", "paper"),
    "eval.params": ("best", "averaged"),
    "eval.average_of": ("last", "best"),
}


# key -> (low, high) for numeric values: "(0" / "[0" / "1)" / "1]" say whether a bound is open or closed;
# None = unbounded. Keys of one model family only are checked where the config has them.
RANGES = {
    **{k: ("(0", None) for k in (
        "model.d_model", "model.num_heads", "model.ffn_dim", "model.enc_layers", "model.dec_layers",
        "model.max_len", "data.max_len", "data.batch_tokens", "data.vocab_size", "data.bucket_multiple",
        "data.synthetic_train", "data.synthetic_valid", "data.synthetic_test", "train.steps", "train.lr",
        "train.adam_eps", "train.log_every", "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
        "train.keep_best",
        "train.max_bad_steps", "eval.beam_size", "eval.batch_size", "eval.throughput_batch",
        "eval.length_cap_ratio", "eval.valid_beam_size", "eval.mask_predict_iter", "eval.length_beam",
        "train.coverage_iterations", "eval.coverage_iterations", "data.max_pairs", "data.max_pair_pieces")},
    **{k: ("[0", "1)") for k in (
        "model.dropout", "model.attention_dropout", "model.activation_dropout", "train.label_smoothing",
        "train.adam_b1", "train.adam_b2")},
    **{k: ("[0", "1]") for k in (
        "train.roll_in_alpha", "train.roll_in_beta", "train.placeholder_smoothing", "train.global_shuffle",
        "train.own_insertion_roll_in", "train.correction_p", "train.pair_alpha", "train.pair_beta")},
    **{k: ("[0", None) for k in (
        "train.warmup_steps", "train.warmup_init_lr", "train.min_lr", "train.weight_decay", "train.clip_norm",
        "train.valid_bleu_sentences", "train.peak_tflops", "eval.length_penalty", "eval.max_len_a", "eval.max_len_b",
        "eval.latency_sentences", "eval.max_iter", "eval.placeholder_penalty", "eval.length_cap_min",
        "eval.trace_sentences", "train.length_loss_weight", "train.sca_weight", "eval.average_checkpoints")},
    "data.bucket_growth": ("[1", None),
    "train.xla_gpu_autotune_level": ("[-1", "4]"),
    "data.synthetic_lexicon": ("(0", "1]"), "data.synthetic_synonyms": ("[0", "1]"),
}


def _in_range(value, low: str | None, high: str | None) -> bool:
    if low is not None and not (value > float(low[1:]) if low[0] == "(" else value >= float(low[1:])):
        return False
    return high is None or (value < float(high[:-1]) if high[-1] == ")" else value <= float(high[:-1]))


def _range_text(low: str | None, high: str | None) -> str:
    if high is None:
        return "positive" if low == "(0" else f">= {low[1:]}" if low[0] == "[" else f"> {low[1:]}"
    return f"in {low}, {high}"


def default_config() -> ml_collections.ConfigDict:
    """Every key a run understands, with defaults; config files start from this and change what they need."""
    c = ml_collections.ConfigDict()
    c.model = dict(
        name="ar", d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, pre_norm=False,
        embed_dropout=-1.0,  # dropout on the embedded inputs; -1 = model.dropout (one rate, as fairseq and the papers)
        positions="sinusoidal", max_len=256, share_embeddings=True, tie_output=True, bert_init=False,
        # token embeddings × √d_model in the input (fairseq's default; the CMLMC authors train with
        # --no-scale-embedding); with share_embeddings, the decoder's own position table (fairseq's) or the encoder's
        scale_embeddings=True, separate_positions=False,
        dtype="float32",
        # the encoder's and decoder's layer stacks as one nn.scan each: one compiled layer body, whatever the depth
        # (parameters stacked along a leading layer axis; transformer.stack_layers converts a per-layer tree)
        scan_layers=False,
        # edit-based models (levt, editor)
        # "f,p,t": decoder layers read by the first-edit (deletion / reposition), placeholder and token heads
        early_exit="",  # "" = all
        separate_deletion=False, separate_placeholder=False,  # own layer stacks (LevT Table 2a)
        separate_reposition=False,  # EDITOR: the reposition head on its own layer stack (the authors' recipe sets it)
        # EDITOR: the key of the reposition head's delete column (eq. 1): "vector" = a learned vector b (the
        # paper), "bos" = BOS's embedding (the authors' code)
        reposition_deletion="vector",
        # CMLM / CMLMC (docs/cmlm.md): the target length from a LENGTH token appended to the source ("token",
        # Mask-Predict and CMLMC) or from the mean-pooled encoder ("pooled", fairseq); optionally as an offset
        # from the source length. RevealPosition (CMLMC §3.1) = masked_attn (a causal sublayer in every decoder
        # layer) + concat_pe (token and position embeddings combined by a linear map of their concatenation)
        length_prediction="token", length_offset=False, masked_attn=False, concat_pe=False,
        # NAT (docs/nat.md): Coverage-NAT's iterative coverage layer in place of the top decoder layer; its bias
        # λ(1 − C) on the source words, or on BOS and EOS too (coverage_bos_eos: how jaxnat covered before)
        coverage=False, coverage_bos_eos=False,
        # vectorized constraints (docs/vecconst.md): constraint pairs as attention entries of every encoder and
        # decoder layer, and the output plug-in with its gate (eq. 11 as written, or renormalised).
        # pair_adapters: "shared" (eq. 6: one network per layer maps the keys and the values, then the layer's
        # projections) or "separate" (the authors' code: a key and a value network, taken as keys and values);
        # pair_output: "eq11" (eqs. 9–11) or "authors" (their code: P_model plus a gated one-hot at the most
        # similar constraint token, clamped to [1e-12, 1])
        pair_attention=True, pair_plug_in=True, pair_renormalise=False, pair_adapters="shared", pair_output="eq11",
    )
    c.data = dict(
        source="synthetic",  # synthetic | text | tfds
        dir="", src_lang="en", tgt_lang="de",
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
        # training that does not pack (LevT, EDITOR, init_lang, pack=false) buckets its batches to at most this
        # many lengths (multiples of bucket_multiple), fitted to the training pairs to pad the fewest tokens:
        # one compiled train program each. 0: the geometric lengths above, which validation and decoding keep
        max_buckets=3,
        # sequence packing: several pairs a training row of max_len tokens, no attention across them, one batch
        # shape (one compiled train program). Taken by the models whose losses stay exact per pair (docs/training.md);
        # the others train on the buckets above, as does every model with pack=false
        pack=True,
        init_lang="",  # e.g. "mt": refining models train (and evaluate) from {split}.mt[.gz], initial hypotheses y0
        # a trained workdir whose SentencePiece models this run uses instead of training its own (copied into
        # this workdir at the start): one vocabulary with an AR rescorer (eval.rescorer)
        spm_from="",
        # a directory of {split}.pairs.jsonl constraint pairs (python -m jaxnat.data.alignment writes them) for
        # models that read pairs (vectorized constraints), and the fixed shape they take: at most max_pairs pairs
        # a sentence, each phrase at most max_pair_pieces pieces (a pair with a longer phrase is left out)
        pairs_dir="", max_pairs=3, max_pair_pieces=8,
    )
    c.train = dict(
        steps=100000, lr=5e-4, warmup_steps=4000, warmup_init_lr=1e-7,
        # after the warm-up: "inverse_sqrt" (fairseq's, the papers') or "linear" decay to 0 at train.steps (for
        # short runs, which end on a small learning rate instead of a large one), "cosine" (half a cosine down to
        # min_lr at train.steps: fairseq's cosine scheduler as the vectorized-constraints authors run stage 2) or
        # "constant" (a fine-tuning phase)
        lr_schedule="inverse_sqrt", min_lr=0.0,
        adam_b1=0.9, adam_b2=0.98, adam_eps=1e-8, weight_decay=0.0, clip_norm=0.0,  # clip_norm 0: off
        label_smoothing=0.1, seed=0,
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
        valid_bleu_sentences=1000,  # sentences of the valid split decoded for validation BLEU
        # edit-based models: roll-in mixtures, per sentence. LevT (Algorithm 1; 0, 0 = the reference code's):
        # α = P(deletion sees y0), β = P(insertion sees the oracle-deleted y0). EDITOR (eqs. 7 and 6, used when
        # dual_path is off): α = P(insertion sees y0), β = P(reposition sees y0)
        roll_in_alpha=0.0, roll_in_beta=0.0, placeholder_smoothing=0.01,
        dual_path=True,  # EDITOR: one coin per batch between insert-then-reposition and reposition-then-insert
        # LevT: the deletion head's roll-in fills are samples from the token head, not its argmax (the note to
        # the paper's eq. 6; off as in Algorithm 1 and fairseq)
        sampling_for_deletion=False,
        # EDITOR: the roll-in's model repositions r~ and fills t~ are samples, not argmaxes (eqs. 6-7 write
        # samples; off as in the authors' code, whose dual-path roll-in is the default)
        roll_in_sampling=False,
        # beyond the papers: the share of roll-in rows that are a random subset of the reference in a uniformly
        # random order, like shuffled soft constraints. EDITOR: instead of the local shuffle (docs/editor.md);
        # LevT: as the deletion head's input, instead of the model's fills (docs/levt.md)
        global_shuffle=0.0,
        # LevT and EDITOR, beyond the papers: the share of batches whose roll-in follows the model's own
        # insertion (insertion heads on what the oracle keeps of it, the first edit on it): docs/editor.md
        own_insertion_roll_in=0.0,
        # EDITOR, beyond the paper: the insertion heads' y0 rows see y0 after the ed3 oracle's reposition (the
        # canvas decoding inserts into), not y0 with its misplaced words; measured worse: docs/editor.md item 10
        insert_after_oracle_reposition=False,
        # CMLM / CMLMC: the length loss's weight; CMLMC's correction loss (§3.2): each observed token replaced
        # with probability correction_p by the fully masked pass's prediction ("bernoulli", the paper) or exactly
        # ⌊p · #observed⌋ of them ("fixed", the authors' code); token loss = L_mask + L_corr ("sum", eq. 3) or
        # their mean ("mean", the authors' code)
        length_loss_weight=0.1, correction=False, correction_p=0.3, correction_count="bernoulli",
        correction_combine="sum",
        # Coverage-NAT: K_train, the coverage layer's iterations in training; β, the weight of the sentence-level
        # coverage agreement (0: off; 0.5 in the paper's fine-tuning phase)
        coverage_iterations=5, sca_weight=0.0,
        # Coverage-NAT: the coverage C as a constant in the gradient (the paper computes it "manually")
        coverage_stop_gradient=False,
        # vectorized constraints: eq. 12's weights of target-constraint tokens (α) and the others (β); the paper's
        # 0.8 / 0.2 for a model decoded with beam search, 0.5 / 0.5 for one decoded with VDBA
        pair_alpha=0.8, pair_beta=0.2,
        # which target tokens get α: "tokens" (every token of a target phrase, wherever it stands: eq. 12 as
        # written) or "span" (the positions of each target phrase's first occurrence: the authors' code)
        pair_weighting="tokens",
        # a trained workdir whose best parameters start this run (fresh optimizer; its vocabulary is used): a
        # fine-tuning phase, e.g. Coverage-NAT's SCA phase, or the second stage of a model that extends the one
        # trained there (vectorized constraints from an AR run: its new parameters start from their
        # initialisation). Ignored once this run has a checkpoint of its own
        init_from="",
    )
    c.eval = dict(
        beam_size=4, length_penalty=1.0, max_len_a=1.2, max_len_b=10, batch_size=64,
        valid_beam_size=1,  # beam used for periodic validation BLEU (greedy is faster)
        latency_sentences=100, throughput_batch=64,
        # the parameters decoded: "best" (best validation BLEU), or "averaged" (written by --mode average).
        # average_checkpoints N > 0 decodes instead the mean of N checkpoints: the newest N training states
        # (average_of="last") or the N best validations (average_of="best"; train.keep_best must be >= N)
        params="best", average_checkpoints=0, average_of="last",
        # refinement decoding (levt, editor)
        max_iter=9, placeholder_penalty=0.0, length_cap_min=10, length_cap_ratio=2.0, run_all_iterations=False,
        deletion_reward=0.0,  # EDITOR: added to the delete column of the reposition scores
        # EDITOR's hard constraints: "block" (a phrase moves only as a whole and is never dropped, split or
        # copied) or "paper" (the paper's and its code's rule: a constraint token may not be deleted where it
        # stands; repositioning may still move, copy or drop it)
        hard_mode="block",
        trace_sentences=0,  # refining models: after evaluation, write trace.html with this many sentences' edits
        constraints="",  # comma list of soft,hard: also evaluate each test split with a constraint set (§12)
        constraint_seed=1,
        # refining models: also decode each test split from other starting sequences (docs/editor.md): the
        # constraints in reference order, every second reference word, the model's own output, the reference
        diagnostic=True,
        # mask-predict (cmlm): T passes, ℓ candidate lengths ("top": the ℓ most probable, "centred": fairseq's
        # argmax ± ⌊ℓ/2⌋). eval.run_all_iterations=false stops a candidate at a pass that changes nothing.
        # constraint_order: hard constraint phrases met in any order or the given one (mask-predict's placement;
        # the AR models' constrained beam search: VDBA's trie or ordered DBA)
        mask_predict_iter=10, length_beam=3, length_beam_mode="top", constraint_order="any",
        # the length candidate kept: highest average token probability ("probability", CMLMC §3.3) or mean
        # log-probability ("log_probability", the Mask-Predict code)
        candidate_score="probability",
        # mask-predict passes 1 … T−1 revise every unconstrained token ("true", the CMLMC authors' decoder: what
        # the correction loss trains for) or only the ones they re-masked ("false", Mask-Predict); "auto" = true
        # for a model trained with train.correction
        update_all="auto",
        # mask-predict: also decode the first test split with each of these numbers of passes, e.g. "1,2,5,10"
        # (BLEU, RIBES, repetition rate and time per T: CMLMC's Table 3a)
        iteration_sweep="",
        # a trained AR workdir with the same vocabulary (train with data.spm_from=it): mask-predict picks, of its
        # length candidates, the one this AR model scores best (mean token log-probability) instead of its own best
        rescorer="",
        # NAT: K_dec, the coverage layer's iterations in decoding. NAT and CMLM: remove each output token equal to
        # the one before it (the NAT papers' post-processing; the repeated-token ratio before removal is reported)
        coverage_iterations=5, remove_repeats=False,
        # vectorized constraints: with data.pairs_dir, keep of each test sentence's pairs only those whose target
        # phrase the model's plain output does not already contain (the authors' test-set extraction)
        pairs_unproduced=False,
        # vectorized constraints: the authors' decoding rule, a constraint token leaves the plug-in once the beam
        # has produced it ("auto": with model.pair_output=authors, as their code decodes)
        pair_consume="auto",
        # Coverage-NAT: decode with λ forced to this value (a control: 0 removes the coverage bias); < 0: as trained
        coverage_lambda=-1.0,
    )
    return c


def load_config(path: str) -> ml_collections.ConfigDict:
    """Executes a config file and returns its `get_config()`."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {path}")
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


def for_one_gpu(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """``config`` (a CPU-sized Multi30k config) resized for one GPU, in place: the papers' base model (d 512, 6+6
    layers, 8 heads, FFN 2048), bf16 compute, packed batches of 16k tokens a side (docs/training.md), evaluation
    in batches of 128. The budgets (steps, schedule) stay the config's."""
    config.model.update(d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dtype="bfloat16")
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


def apply_override(config: ml_collections.ConfigDict, key: str, text: str) -> None:
    """Sets `config.<key>` from its command-line text, with the type of the existing value."""
    keys = leaf_keys(config)
    if key not in keys:
        near = difflib.get_close_matches(key, keys, n=1, cutoff=0.0)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise ConfigError(f"unknown config key {key}{hint}")
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


def validate(config: ml_collections.ConfigDict) -> None:
    """Checks values that a type check cannot: choices, positivity, divisibility."""
    for key, allowed in CHOICES.items():
        node, *rest = key.split(".")
        if node in config and rest[0] in config[node] and config[node][rest[0]] not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}, not {config[node][rest[0]]!r}")
    m, t, d = config.model, config.train, config.data
    for key, (low, high) in RANGES.items():
        section, name = key.split(".")
        if section in config and name in config[section] and not _in_range(config[section][name], low, high):
            raise ConfigError(f"{key} must be {_range_text(low, high)}, got {config[section][name]}")
    if m.d_model % m.num_heads:
        raise ConfigError(f"model.d_model ({m.d_model}) must be divisible by model.num_heads ({m.num_heads})")
    if t.lr_schedule in ("linear", "cosine") and t.warmup_steps >= t.steps:
        raise ConfigError(f"train.warmup_steps ({t.warmup_steps}) must be below train.steps ({t.steps}) with "
                          f"train.lr_schedule={t.lr_schedule}, which decays to its end at the last step")
    if m.embed_dropout != -1.0 and not 0.0 <= m.embed_dropout < 1.0:
        raise ConfigError(f"model.embed_dropout must be -1 (= model.dropout) or in [0, 1), got {m.embed_dropout}")
    if d.max_len > m.max_len:
        raise ConfigError(f"data.max_len ({d.max_len}) exceeds model.max_len ({m.max_len})")
    if type(d.max_buckets) is not int or d.max_buckets < 0:
        raise ConfigError(f"data.max_buckets must be an integer >= 0 (0: the geometric buckets of "
                          f"data.bucket_growth), got {d.max_buckets!r}")
    if d.batch_tokens < d.max_len:
        raise ConfigError(f"data.batch_tokens ({d.batch_tokens}) must be at least data.max_len ({d.max_len})")
    if m.share_embeddings and not d.joint_vocab:
        raise ConfigError("model.share_embeddings needs data.joint_vocab=true (one vocabulary for both sides)")
    modes = [mode for mode in config.eval.constraints.split(",") if mode]
    if any(mode not in ("soft", "hard") for mode in modes):
        raise ConfigError(f"eval.constraints is a comma list of soft,hard; got {config.eval.constraints!r}")
    from jaxnat.decoding.request import check_supported
    from jaxnat.models import supports

    sweep = [v.strip() for v in config.eval.iteration_sweep.split(",") if v.strip()]
    sweeps = supports(m.name).sweep_key and (m.name != "nat" or m.coverage)
    if sweep and (not all(v.isdigit() and int(v) >= 1 for v in sweep) or not sweeps):
        raise ConfigError(f"eval.iteration_sweep is a comma list of decoding depths (each >= 1): mask-predict passes "
                          f"(model.name=cmlm) or coverage iterations (model.name=nat with model.coverage=true); got "
                          f"{config.eval.iteration_sweep!r} with model.name={m.name!r}")
    from jaxnat.models.insertion import early_exit

    try:  # what the evaluation will ask of the model, checked before anything is trained
        check_supported(m.name, supports(m.name), soft="soft" in modes, hard="hard" in modes,
                        trace=config.eval.trace_sentences > 0, beam_size=config.eval.beam_size)
    except JaxnatError as e:
        raise ConfigError(f"{e} (asked by eval.constraints, eval.trace_sentences or eval.beam_size)") from None
    if supports(m.name).pairs and not d.pairs_dir:
        raise ConfigError(f"model {m.name!r} trains on constraint pairs: set data.pairs_dir (python -m "
                          f"jaxnat.data.alignment writes them; on the embedded corpus: data.pairs_dir=synthetic)")
    early_exit(m)
    if config.eval.hard_mode != "block" and m.name != "editor":
        raise ConfigError(f"eval.hard_mode={config.eval.hard_mode} is EDITOR's (its reposition); model.name is "
                          f"{m.name!r}")
    if m.name == "editor" and not config.train.dual_path and config.train.own_insertion_roll_in > 0:
        raise ConfigError("train.own_insertion_roll_in is an addition to dual-path roll-in; with train.dual_path=false "
                          "(the paper's eqs. 6-7, Gu et al.'s roll-in at alpha=1, beta=0) set it to 0")
    if m.name == "nat" and m.coverage and m.dec_layers < 2:
        raise ConfigError(f"model.coverage needs model.dec_layers >= 2 (the layer below the coverage layer starts its "
                          f"iterations); got {m.dec_layers}")
    if config.eval.rescorer and not supports(m.name).rescoring:
        raise ConfigError(f"eval.rescorer: model {m.name!r} has no candidates to rescore (mask-predict models do)")
    if d.source == "text" and not d.dir:
        raise ConfigError("data.source=text needs data.dir (a directory of {split}.{lang}[.gz] files): "
                          "--config.data.dir=DIR")
    if d.source == "synthetic" and d.dir:
        raise ConfigError(f"data.dir={d.dir!r} is not read with data.source=synthetic (the embedded corpus); "
                          f"to train on the files there: --config.data.source=text")
    if d.init_lang:  # post-editing data: a third file per split, refined by the model from y0 = its line
        if not supports(m.name).init:
            refining = ", ".join(name for name in MODELS if supports(name).init)
            raise ConfigError(f"data.init_lang trains a refining model ({refining}) from initial hypotheses; "
                              f"model.name is {m.name!r}")
        if d.source != "text":
            raise ConfigError(f"data.init_lang needs data.source=text (the {{split}}.{d.init_lang} files are read "
                              f"from data.dir); data.source is {d.source!r}")
        if d.init_lang in (d.src_lang, d.tgt_lang):
            raise ConfigError(f"data.init_lang ({d.init_lang!r}) must differ from data.src_lang and data.tgt_lang: "
                              f"it names the initial-hypothesis files, e.g. 'mt' for train.mt")
        if m.name == "levt" and config.train.roll_in_alpha == 0 and config.train.roll_in_beta == 0:
            raise ConfigError("data.init_lang with train.roll_in_alpha = train.roll_in_beta = 0: no LevT head would "
                              "ever see the initial hypotheses, so post-editing training would be plain translation "
                              "training; set either above 0 (the paper's post-editing roll-in, docs/levt.md)")


# The keys that define a trained model's parameters, vocabulary and the meaning of its heads: a workdir is
# resumed, evaluated or translated only with the values it was trained with. Everything else (dropout, steps,
# learning rate, decoding settings) may change between runs on one workdir.
MODEL_KEYS = tuple(f"model.{k}" for k in (
    "name", "d_model", "ffn_dim", "num_heads", "enc_layers", "dec_layers", "pre_norm", "positions", "max_len",
    "share_embeddings", "scale_embeddings", "separate_positions", "tie_output", "early_exit", "separate_deletion",
    "separate_placeholder", "separate_reposition", "reposition_deletion", "length_prediction", "length_offset",
    "masked_attn", "concat_pe", "coverage", "coverage_bos_eos", "pair_attention", "pair_plug_in", "pair_adapters",
    "pair_output", "scan_layers")) + (
    "data.vocab_size", "data.joint_vocab", "data.spm_model_type")

# Model keys added after runs were trained: such a run's config.json lacks the key, which there means what the
# code did before it existed (so that an older workdir is decoded as it was trained, and a config that asks for
# something else is refused): key -> (value, the switch that must be on in the run for the key to mean anything,
# or None).
BEFORE_ADDED = {"model.coverage_bos_eos": (True, "model.coverage"), "model.scale_embeddings": (True, None),
                "model.separate_positions": (False, None)}


_UNKNOWN = object()


def _recorded(recorded: dict, key: str, default=_UNKNOWN):
    """The value of ``key`` in a recorded config.json, its `BEFORE_ADDED` value when absent, else ``default``
    (a key added since that means nothing in this run); KeyError without a default."""
    section, name = key.split(".")
    if name in recorded.get(section, {}):
        return recorded[section][name]
    value, switch = BEFORE_ADDED.get(key, (default, None))
    if switch is not None:
        on, flag = switch.split(".")
        value = value if recorded.get(on, {}).get(flag) else default
    if value is _UNKNOWN:
        raise KeyError(key)
    return value


def check_matches_workdir(config: ml_collections.ConfigDict, workdir: str, ignore: tuple[str, ...] = ()) -> None:
    """Raises a one-line `ConfigError` naming every `MODEL_KEYS` value (but ``ignore``) that differs from the one
    recorded in ``workdir/config.json`` (nothing to compare with: a new workdir). Keys the recorded config lacks
    (added to jaxnat after that run) are compared with their `BEFORE_ADDED` value, or not at all."""
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} is unreadable ({type(e).__name__}); it records the config the run was trained "
                          f"with") from None
    differ = []
    for key in (k for k in MODEL_KEYS if k not in ignore):
        section, name = key.split(".")
        try:
            trained = _recorded(recorded, key)
        except KeyError:
            continue
        if trained != config[section][name]:
            differ.append(f"{key}={config[section][name]!r} (trained: {trained!r})")
    if differ:
        raise ConfigError(f"the config does not match the run in {workdir}: {'; '.join(differ)}; use the config it "
                          f"was trained with, or another --workdir")


def workdir_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a workdir was trained with (its config.json over the defaults, so keys added to jaxnat since
    are there with their defaults, or with the value they stand for in that run: `BEFORE_ADDED`). ConfigError
    when it has none."""
    path = os.path.join(workdir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: no readable config of a trained run ({type(e).__name__})") from None
    config = default_config()
    for section, values in recorded.items():
        if section in config and isinstance(values, dict):
            config[section].update({k: v for k, v in values.items() if k in config[section]})
    for key in BEFORE_ADDED:  # what the run did before the key existed, where the key means something
        section, name = key.split(".")
        config[section][name] = _recorded(recorded, key, default=config[section][name])
    return config


def check_known_keys(config: ml_collections.ConfigDict, path: str) -> None:
    """A one-line `ConfigError` for the first key of ``config`` (loaded from ``path``) that jaxnat does not know,
    with the nearest one it does: ml_collections' ``update`` adds unknown keys without a word, so a misspelt key
    in a config file would otherwise train without its feature."""
    known = leaf_keys(default_config())
    for key in leaf_keys(config):
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.0)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise ConfigError(f"{path} sets unknown config key {key}{hint}")


def build_config(path: str, overrides: list[str]) -> ml_collections.ConfigDict:
    """Loads a config file, checks its keys, applies command-line overrides and validates the result."""
    config = load_config(path)
    check_known_keys(config, path)
    for key, value in parse_overrides(overrides):
        apply_override(config, key, value)
    validate(config)
    return config
