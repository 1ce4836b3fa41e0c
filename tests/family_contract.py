"""The contract every model family meets (docs/design.md, "How to add a model family"), one function that
tests/test_family.py runs for each registered family: it builds from the tiny test config (one beam), its loss
returns ``(float32[] loss · n, aux)`` with float32[] 'nll' and 'count' (the trainer divides their sums) and a
float32[] for each of the spec's terms (`ModelSpec.left_out` one of them), its ``generate`` returns tokens, score,
the per-token log-probabilities and exactly the counts it declares, as wide as the request asks (and n-best lists
where it declares them; and where it declares forced decoding, `ModelSpec.score`, each given output's log P and
score), and its output
capacity stays within `model.max_len`; its `ModelSpec` bears its name; it is built and validated from its own
config sections (and those of the families it extends) alone; its `Family.reads` names exactly the keys of
`READ_BY_SOME` its build, capacity and generate read (and data.pack where its spec packs, data.alignments_dir where it
reads train.alignment_lambda). Shapes and dtypes only
(traced with `jax.eval_shape`): what each computes is tested with it."""

import copy

import jax
import jax.numpy as jnp
import ml_collections

from jaxnat.config import READ_BY_SOME, build_config, validate
from jaxnat.data.vocab import BOS_ID, EOS_ID
from jaxnat.decoding.request import DecodeRequest
from jaxnat import models
from jaxnat.models import build_model, family_of, lineage

OUTPUTS = {"tokens", "score", "token_logp", "token_scored"}


def own_sections(config, name: str):
    """``config`` without the sections of the families that ``name`` neither is nor extends. A family that reads
    another's section (a copied family still reading its original's) would ignore its own, and read keys its
    users cannot set (the config refuses values there): here that read fails, naming the section."""
    read = {family.name for family in lineage(name)}
    own = copy.deepcopy(config)
    for other in models.names():
        if other not in read and other in own:
            del own[other]
    return own


# (family, key of READ_BY_SOME) that the family reads where the key cannot act, and so does not declare: NAT's
# one mask-predict pass has no later pass for eval.run_all_iterations to stop
READ_INERT = {("nat", "eval.run_all_iterations")}


class Reads:
    """``config`` as a family's build sees it, noting in ``seen`` each key of its sections ``watched`` read."""

    def __init__(self, config, seen: set, watched=("eval", "data", "train"), path: str = ""):
        self._config, self._seen, self._watched, self._path = config, seen, watched, path

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._noted(name, getattr(self._config, name))  # (an absent section: the config's AttributeError)

    def __getitem__(self, name: str):
        return self._noted(name, self._config[name])

    def _noted(self, name: str, value):
        if isinstance(value, ml_collections.ConfigDict):
            return Reads(value, self._seen, (), f"{name}.") if name in self._watched else value
        self._seen.add(self._path + name)
        return value

    def __contains__(self, name: str) -> bool:
        return name in self._config


def check_reads(name: str, spec, seen: set) -> None:
    """`Family.reads` against the keys of `READ_BY_SOME` the spec's build, capacity and generate were ``seen`` to
    read: one it reads undeclared would be refused where it acts, one it declares unread accepted where it does
    nothing."""
    declared = set(family_of(name).reads)
    read = {key for key in seen if key in READ_BY_SOME and (name, key) not in READ_INERT}
    read |= {"data.pack"} if spec.packs else set()
    # the trainer reads a guided alignment's files for a model whose loss weighs them (config.SWITCHED pairs the two)
    read |= {"data.alignments_dir"} if "train.alignment_lambda" in read else set()
    assert declared == read, (f"{name}: Family.reads lacks {sorted(read - declared)}, and names unread "
                              f"{sorted(declared - read)}")


def check_contract(name: str, vocab: int = 40) -> None:
    config = own_sections(build_config("tests/configs/tiny.py", [
        f"--config.model.name={name}", "--config.eval.beam_size=1", "--config.data.pairs_dir=synthetic"]), name)
    validate(config)
    seen = set()
    spec = build_model(Reads(config, seen), vocab, vocab)
    # the evaluator finds the family's hooks (its output metrics) by the spec's name: a copied family's spec still
    # named after its original would be scored with the original's
    assert spec.name == name, f"family {name!r} builds a ModelSpec named {spec.name!r}"
    src = jnp.asarray([[BOS_ID, 7, 8, EOS_ID]], jnp.int32)
    batch = {"src": src, "tgt": src}
    params = jax.eval_shape(spec.init, jax.random.PRNGKey(0), batch)
    if family_of(name).train_extras is None:  # a family with extras of its own is trained on batches that carry them
        loss, aux = jax.eval_shape(lambda p: spec.loss(p, batch, jax.random.PRNGKey(0), False), params)
        assert (loss.shape, loss.dtype) == ((), jnp.float32), name
        # the trainer reads each of the spec's terms from aux (when it traces the train step, after the data is ready)
        assert set(spec.terms) <= set(aux), f"{name}: ModelSpec.terms {spec.terms}, its loss's aux {sorted(aux)}"
        assert all((aux[k].shape, aux[k].dtype) == ((), jnp.float32) for k in ("nll", "count", *spec.terms)), name
    assert not spec.left_out or spec.left_out[0] in spec.terms, f"{name}: ModelSpec.left_out names none of its terms"
    width = spec.capacity(src.shape[1])
    assert width <= config.model.max_len and spec.capacity(config.model.max_len) <= config.model.max_len, name
    width -= 1  # narrower than the capacity, as the translator asks of a model that plans its lengths
    out = jax.eval_shape(spec.generate, params, DecodeRequest(src, max_out=width))
    assert set(out) - {"phrase", "length"} == OUTPUTS | set(spec.supports.counts), name
    shape = out["tokens"].shape
    assert shape == (1, width) and out["tokens"].dtype == jnp.int32, f"{name}: tokens {out['tokens']}, asked {width}"
    assert (out["score"].shape, out["score"].dtype) == ((1,), jnp.float32), name
    assert (out["token_logp"].shape, out["token_logp"].dtype) == (shape, jnp.float32), name
    assert (out["token_scored"].shape, out["token_scored"].dtype) == (shape, jnp.bool_), name
    assert all((out[c].shape, out[c].dtype) == ((1,), jnp.int32) for c in spec.supports.counts), name
    if spec.supports.nbest:  # n-best lists beside the output (`Supports.nbest`), as many as asked
        out = jax.eval_shape(spec.generate, params, DecodeRequest(src, max_out=width, beam_size=3, nbest=2))
        assert (out["nbest_tokens"].shape, out["nbest_tokens"].dtype) == ((1, 2, width), jnp.int32), name
        assert (out["nbest_score"].shape, out["nbest_score"].dtype) == ((1, 2), jnp.float32), name
    # forced decoding where the family declares it (`Supports.score`): the log-probability and score of given outputs
    assert spec.supports.score == family_of(name).supports.score == (spec.score is not None), (
        f"{name}: Supports.score {spec.supports.score} (its Family's {family_of(name).supports.score}), "
        f"ModelSpec.score {'None' if spec.score is None else 'set'}")
    if spec.score is not None:
        tgt = jnp.asarray([[BOS_ID, 9, 7, EOS_ID, 0]], jnp.int32)
        out = jax.eval_shape(spec.score, params, DecodeRequest(src), tgt)
        shapes = {k: (v.shape, v.dtype) for k, v in out.items()}
        assert shapes.pop("token_logp", ((1, 4), jnp.float32)) == ((1, 4), jnp.float32), name  # [B, T - 1], if any
        assert shapes == dict.fromkeys(("logp", "score"), ((1,), jnp.float32)), name
    check_reads(name, spec, seen)
