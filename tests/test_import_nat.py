"""fairseq's length-predicting and edit models imported: tests/data/import/fairseq-nat/ holds a tiny `cmlm_transformer`,
`nonautoregressive_transformer` (and one with `--src-embedding-copy`) and `levenshtein_transformer` with random
weights, written by the real fairseq
0.12.2, and what fairseq computed with them (tools/make_import_fixtures.py). Each is imported as a user would; its
heads' log-probabilities must be fairseq's within 1e-4, and its outputs under eval.search_rules=fairseq (LevT: its
own rules, which are fairseq's) fairseq's `IterativeRefinementGenerator`'s token for token."""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxnat.config import workdir_config
from jaxnat.data.vocab import BOS_ID, MASK_ID, PAD_ID
from jaxnat.importers import write_workdir
from jaxnat.models.transformer import token_mask
from jaxnat.restore import load_translator, with_config
from tests.test_import import to_jaxnat

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "import", "fairseq-nat")
LM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "ngram", "lm.arpa")
FAIRSEQ_PAD, FAIRSEQ_UNK = 1, 3
_IMPORTED = {}


def expected(name):
    with open(os.path.join(DATA, f"expected_{name}.json"), encoding="utf-8") as f:
        outputs = json.load(f)
    with np.load(os.path.join(DATA, f"expected_{name}.npz")) as z:
        return {k: z[k] for k in z.files}, outputs


@pytest.fixture(scope="module", params=["cmlm", "levt", "nat", "nat-copy"])
def imported(request, tmp_path_factory):
    name = request.param
    if name not in _IMPORTED:
        workdir = str(tmp_path_factory.mktemp(name) / "run")
        write_workdir(f"fairseq:{DATA}/{name}.pt", workdir)
        config = workdir_config(workdir)
        config.eval.search_rules = "fairseq"
        _IMPORTED[name] = name, config, load_translator(config, workdir)
    return _IMPORTED[name]


def sources(arrays):
    """fairseq's left-padded [<s> … </s>] sources -> jaxnat's [BOS … EOS] rows (int32[B, S], right-padded)."""
    rows = [to_jaxnat("fairseq", [t for t in r if t != FAIRSEQ_PAD]).tolist() for r in arrays["src_ids"]]
    width = max(map(len, rows))
    return jnp.asarray([r + [PAD_ID] * (width - len(r)) for r in rows], jnp.int32)


def canvas(ids):
    """fairseq's canvas ids (<unk> its mask and placeholder) -> jaxnat's, <unk> as MASK."""
    return jnp.asarray(np.where(ids == FAIRSEQ_UNK, MASK_ID, to_jaxnat("fairseq", ids)), jnp.int32)


def assert_vocabulary_logp(ours, theirs, real, rtol=0.0):
    """ours: float32[B, L, V] jaxnat's log-probabilities; theirs: fairseq's over its dictionary, compared on the
    ``real`` positions (jaxnat's PLH and MASK, absent from fairseq's model, hold no probability)."""
    columns = to_jaxnat("fairseq", np.arange(theirs.shape[-1]))
    np.testing.assert_allclose(np.asarray(ours)[..., columns][real], theirs[real], atol=1e-4, rtol=rtol)
    assert np.all(np.exp(np.delete(np.asarray(ours), columns, axis=-1))[real] < 1e-12)


def test_heads_compute_fairseqs_log_probabilities(imported):
    name, _, translator = imported
    arrays, _ = expected(name)
    module, params = translator.spec.module, translator.params
    apply = jax.jit(module.apply, static_argnames="method")  # one program a head (eager: op by op, 3x the time)
    src = sources(arrays)
    tokens = canvas(arrays["canvas_ids"])
    real = arrays["canvas_ids"] != FAIRSEQ_PAD
    if name == "levt":
        memory, src_mask = apply(params, src, method="encode"), token_mask(src)
        ref = canvas(arrays["tgt_ids"])
        ref_real = arrays["tgt_ids"] != FAIRSEQ_PAD
        deletion = apply(params, ref, memory, src_mask, method="deletion_logits")
        np.testing.assert_allclose(jax.nn.log_softmax(deletion)[ref_real], arrays["deletion_logp"][ref_real],
                                   atol=1e-4)
        slots = apply(params, ref, memory, src_mask, method="placeholder_logits")
        slot_real = ref_real[:, 1:]
        np.testing.assert_allclose(jax.nn.log_softmax(slots)[slot_real], arrays["placeholder_logp"][slot_real],
                                   atol=1e-4)
        logits = apply(params, tokens, memory, src_mask, method="token_logits")
    else:
        memory, length_logits = apply(params, src, method="encode")
        np.testing.assert_allclose(jax.nn.log_softmax(length_logits), arrays["length_logp"], atol=1e-4)
        copies = {"src": src} if name == "nat-copy" else {}  # the decoder reads the source's embeddings
        logits = apply(params, tokens, memory, token_mask(src), method="token_logits", **copies)
    assert_vocabulary_logp(jax.nn.log_softmax(logits), arrays["token_logp"], real)


def test_outputs_are_fairseqs_under_its_rules(imported):
    """CMLM: 10 passes of mask-predict over 3 lengths; NAT: one pass over 3 lengths; LevT: up to 10 iterations."""
    name, _, translator = imported
    arrays, outputs = expected(name)
    src = [np.asarray(r)[np.asarray(r) != PAD_ID] for r in np.asarray(sources(arrays))]
    results = translator.translate_ids(src, beam_size=1, batch_size=len(src))
    for ours, theirs, score in zip(results, outputs["tokens"], outputs["score"]):
        tokens = np.asarray(ours["tokens"])
        assert tokens[tokens != PAD_ID].tolist() == to_jaxnat("fairseq", theirs).tolist()
        assert float(ours["score"]) == pytest.approx(score, abs=1e-4)


def test_the_da_transformer_plugins_model_computes_its_graphs_and_decodes_as_the_plugin(tmp_path_factory):
    """fairseq-nat/dat.pt, the DA-Transformer authors' `glat_decomposed_link` (their fairseq plugin, sources
    without BOS, λ = 4): graphs of the plugin's sizes (λ · words + 1 vertices), each vertex's token
    log-probabilities and the links the plugin's decoding reads, within 1e-4 (−inf on the same edges); its
    lookahead (β 0.3, read from the checkpoint), greedy, Viterbi and joint Viterbi (dat.viterbi_convention=authors),
    and beam search (dat.decode=dagsearch) outputs token for token, from the text."""
    workdir = str(tmp_path_factory.mktemp("dat") / "run")
    write_workdir(f"fairseq:{DATA}/dat.pt", workdir)
    config = workdir_config(workdir)
    translator = load_translator(config, workdir)
    arrays, outputs = expected("dat")
    rows = [[BOS_ID] + to_jaxnat("fairseq", [t for t in r if t != FAIRSEQ_PAD]).tolist() for r in arrays["src_ids"]]
    src = jnp.asarray([r + [PAD_ID] * (max(map(len, rows)) - len(r)) for r in rows], jnp.int32)
    logits, links, n_vertices = jax.jit(translator.spec.module.apply)(translator.params, src)
    real = arrays["vertex_ids"] != FAIRSEQ_PAD
    assert np.asarray(n_vertices).tolist() == real.sum(1).tolist()
    width = real.shape[1]
    # (its sure vertices' unlikely tokens lie at -20 to -40, where float32's rounding alone is ~1e-5 of them)
    assert_vocabulary_logp(jax.nn.log_softmax(logits)[:, :width], arrays["vertex_logp"], real, rtol=1e-5)
    theirs, ours = arrays["links"], np.asarray(links)[:, :width, :width]
    edges = np.isfinite(theirs)
    np.testing.assert_array_equal(ours > -1e8, edges)
    np.testing.assert_allclose(ours[edges], theirs[edges], atol=1e-4)
    assert (config.dat.decode, config.dat.lookahead_beta) == ("lookahead", 0.3)

    def decoding(**keys):
        changed = config.copy_and_resolve_references()
        changed.dat.update(keys)
        return with_config(translator, changed)

    encoded, _ = translator.encode(outputs["src"])  # the text pipeline: Moses and BPE as the plugin's task applies them
    assert [np.asarray(r).tolist() for r in encoded] == rows
    # their beam search (the DAG-Search extension) at beam 6, 2 prefixes a length, repeats kept (their decode_dedup)
    authors = decoding(decode="dagsearch", beam_per_length=2, remove_repeats=False)
    for strategy, decoder, beam in (
            ("lookahead", translator, 1), ("greedy", decoding(decode="greedy"), 1),
            ("viterbi", decoding(decode="path_viterbi", viterbi_convention="authors"), 1),
            ("jointviterbi", decoding(decode="viterbi", viterbi_convention="authors"), 1), ("beamsearch", authors, 6)):
        results = decoder.translate_ids(encoded, beam_size=beam, batch_size=len(encoded))
        got = [np.asarray(r["tokens"])[np.asarray(r["tokens"]) != PAD_ID].tolist() for r in results]
        assert got == [to_jaxnat("fairseq", t).tolist() for t in outputs[strategy]], strategy


BEAM = {"decode_strategy": "beamsearch", "decode_beamsize": 200.0, "decode_max_beam_per_length": 20.0,
        "decode_top_p": 0.8, "decode_gamma": 0.3}
PREVENT = {"decode_no_repeated_ngram": 1, "decode_no_consecutive_repeated_ngram": 0, "decode_top_p": 0.8}


@pytest.mark.parametrize("settings, imported", [
    # their beam search as it is set up there: width, prefixes per length, top-p, LM weight, repeats kept
    (BEAM, {"dat.decode": "dagsearch", "eval.beam_size": 200, "dat.beam_per_length": 20, "dat.top_p": 0.8,
            "dat.lm_weight": 0.3, "dat.remove_repeats": False, "eval.no_repeat_ngram": 0}),
    ({**BEAM, **PREVENT}, {"dat.decode": "dagsearch", "eval.no_repeat_ngram": 1, "eval.no_consecutive_repeat": 0}),
    # the n-gram LM their beam search fuses: eval.lm where it is an ARPA file here, else left out with a warning
    ({**BEAM, "decode_lm_path": LM}, {"eval.lm": LM}),
    ({**BEAM, "decode_lm_path": f"{DATA}/dat.pt"}, {"eval.lm": None}),
    # lookahead's loop: its n = 1 bans nothing but the token before
    # (that loop keeps the repeats it could not step around)
    ({**PREVENT, "decode_strategy": "lookahead"}, {"dat.decode": "lookahead", "eval.no_repeat_ngram": 0,
                                                   "eval.no_consecutive_repeat": 1, "dat.top_p": 0.8,
                                                   "dat.remove_repeats": False}),
    # greedy steps around repeats in lookahead's loop (decode_beta) with the consecutive rule, not with n-grams alone
    ({**PREVENT, "decode_strategy": "greedy", "decode_no_repeated_ngram": 3, "decode_no_consecutive_repeated_ngram": 2},
     {"dat.decode": "lookahead", "eval.no_repeat_ngram": 3, "eval.no_consecutive_repeat": 2,
      "dat.remove_repeats": False}),
    ({**PREVENT, "decode_strategy": "greedy", "decode_no_repeated_ngram": 3},
     {"dat.decode": "greedy", "dat.remove_repeats": None}),
    # their Viterbi decodings under their convention; n-gram prevention refused as theirs asserts
    ({"decode_strategy": "viterbi", "decode_viterbibeta": 0.5},
     {"dat.decode": "path_viterbi", "dat.viterbi_convention": "authors", "dat.viterbi_beta": 0.5}),
    ({"decode_strategy": "jointviterbi"}, {"dat.decode": "viterbi", "dat.viterbi_convention": "authors"}),
    ({**PREVENT, "decode_strategy": "jointviterbi"}, "jointviterbi with decode_no_repeated_ngram=1 .* refuses them"),
    ({**PREVENT, "decode_strategy": "viterbi"}, "viterbi with decode_no_repeated_ngram=1 .* refuses them"),
    # their sampling: eval.sampling with their cut, temperature and bans
    ({**PREVENT, "decode_strategy": "sample", "decode_temperature": 0.5, "decode_no_consecutive_repeated_ngram": 2},
     {"eval.sampling": True, "dat.sampler": "authors", "dat.top_p": 0.8, "eval.temperature": 0.5,
      "eval.no_repeat_ngram": 1, "eval.no_consecutive_repeat": 2, "dat.remove_repeats": False}),
])
def test_the_da_transformer_plugins_decoding_settings_are_imported(monkeypatch, caplog, settings, imported):
    """A checkpoint's decoding settings decode in jaxnat as they would in the plugin: its beam search with its own
    settings (decode_dedup off by default) and its n-gram LM (one that is not here, a warning), its Viterbi
    decodings under its convention, its n-gram prevention where its decoders apply it (Viterbi refuses it in one
    line, as theirs asserts), its sampling. The export writes them back: the settings it
    writes for the imported workdir's decoding import as the same decoding, with no warning."""
    from jaxnat.exporters.fairseq import _dat_decoding
    from jaxnat.importers import read, torch_file

    ckpt = torch_file.load(f"{DATA}/dat.pt")
    for key, value in settings.items():
        setattr(ckpt["cfg"]["model"], key, value)
        if key in ckpt["cfg"]["task"]:
            ckpt["cfg"]["task"][key] = value
    monkeypatch.setattr(torch_file, "load", lambda path: ckpt)
    if isinstance(imported, str):
        from jaxnat.errors import DataError

        with pytest.raises(DataError, match=imported):
            read(f"fairseq:{DATA}/dat.pt")
        return
    overrides = read(f"fairseq:{DATA}/dat.pt").overrides
    assert {k: overrides.get(k) for k in imported} == imported
    assert ("which is no ARPA file here: decode with --config.eval.lm=FILE" in caplog.text) == (
        "decode_lm_path" in settings and not overrides.get("eval.lm"))
    config = _dat_config(overrides)
    caplog.clear()
    written = _dat_decoding(config.dat, config.eval)
    assert "cannot decode as this workdir does" not in caplog.text
    for key in [k for k in vars(ckpt["cfg"]["model"]) if k.startswith("decode_") and k != "decode_lm_path"]:
        delattr(ckpt["cfg"]["model"], key)
        ckpt["cfg"]["task"].pop(key, None)
    for key, value in written.items():
        setattr(ckpt["cfg"]["model"], key, value)
    back = read(f"fairseq:{DATA}/dat.pt").overrides
    decoding = [k for k in {*overrides, *back} if k.startswith(("dat.", "eval."))]
    assert {k: back.get(k) for k in decoding} == {k: overrides.get(k) for k in decoding}


def _dat_config(keys: dict):
    """A DA-Transformer's config with ``keys`` ({"section.name": value}) set as an import or a command line sets
    them, the family's own defaults of the keys not given."""
    from jaxnat.config import default_config, family_defaults

    config = default_config()
    config.model.name = "dat"
    for key, value in keys.items():
        section, _, name = key.partition(".")
        config[section][name] = value
    return family_defaults(config, set(keys))


@pytest.mark.parametrize("keys, departure", [
    ({"dat.decode": "beam"}, "dat.decode=beam, .* \\(written as the plugin's lookahead\\)"),
    ({"dat.decode": "viterbi"}, "dat.decode=viterbi, dat.viterbi_convention=jaxnat"),
    ({"eval.sampling": True}, "dat.decode=lookahead, .*eval.sampling=True \\(written as the plugin's lookahead\\)"),
    ({"eval.sampling": True, "dat.sampler": "authors", "eval.beam_size": 4, "dat.remove_repeats": True},
     "eval.beam_size=4 \\(their sample draws one path a sentence\\); dat.remove_repeats=True"),
    ({"eval.no_repeat_ngram": 1}, "eval.no_repeat_ngram=1 \\(their lookahead bans the token before, not every token "
                                  "seen\\); eval.no_consecutive_repeat=0"),
    ({"eval.no_repeat_ngram": 3, "eval.no_consecutive_repeat": 1}, "dat.remove_repeats=True \\(their lookahead keeps "
                                                                  "consecutive repeats there\\)"),
    ({"eval.no_repeat_ngram": 3, "eval.no_consecutive_repeat": 1, "dat.remove_repeats": False}, None),
    ({"dat.decode": "greedy", "dat.remove_repeats": False}, "dat.remove_repeats=False \\(their greedy drops"),
])
def test_an_export_names_a_decoding_the_da_transformer_plugin_lacks(caplog, keys, departure):
    """A workdir's decoding that the plugin's settings cannot express is written as the nearest (its lookahead) with a
    warning naming what departs; n-gram prevention its lookahead's loop applies, none."""
    from jaxnat.exporters.fairseq import _dat_decoding

    config = _dat_config(keys)
    written = _dat_decoding(config.dat, config.eval)
    if departure is None:
        assert "cannot decode as this workdir does" not in caplog.text
        assert (written["decode_strategy"], written["decode_no_repeated_ngram"],
                written["decode_no_consecutive_repeated_ngram"]) == ("lookahead", 3, 1)
    else:
        assert re.search(f"the DA-Transformer plugin cannot decode as this workdir does: {departure}", caplog.text)


def test_a_cmlm_with_copied_source_embeddings_is_refused_in_one_line(monkeypatch):
    """fairseq's CMLM with --src-embedding-copy (inherited from its NAT) would copy in every pass, and read none of
    the tokens it keeps: refused, named."""
    from jaxnat.errors import DataError
    from jaxnat.importers import read, torch_file

    ckpt = torch_file.load(f"{DATA}/cmlm.pt")
    setattr(ckpt["cfg"]["model"], "src_embedding_copy", True)
    monkeypatch.setattr(torch_file, "load", lambda path: ckpt)
    with pytest.raises(DataError, match="src_embedding_copy=True is supported in nonautoregressive_transformer only, "
                                        "not in cmlm_transformer"):
        read(f"fairseq:{DATA}/cmlm.pt")


@pytest.mark.parametrize("setting, value, message", [
    ("_name", "ls_glat_decomposed_link_base", "LightSeq model: convert it with the plugin's .*convert_ls_to_fs.py"),
    ("upsample_base", "predict", "upsample_base='predict' is not supported"),
    ("decode_upsample_scale", 6.5, "decode_upsample_scale 6.5 is not a whole number"),
    ("segment_embedding", True, "segment_embedding=True is not supported"),
    ("links_feature", "feature:sinposition", "links_feature='feature:sinposition' is not supported"),
])
def test_a_da_transformer_jaxnat_cannot_read_is_refused_in_one_line(monkeypatch, setting, value, message):
    """Settings of the plugin's models that jaxnat's `dat` has no equivalent of, each named (the checkpoint's own
    settings changed: in its model's and, where it keeps one, its task's)."""
    from jaxnat.errors import DataError
    from jaxnat.importers import read, torch_file

    ckpt = torch_file.load(f"{DATA}/dat.pt")
    setattr(ckpt["cfg"]["model"], setting, value)
    if setting in ckpt["cfg"]["task"]:
        ckpt["cfg"]["task"][setting] = value
    monkeypatch.setattr(torch_file, "load", lambda path: ckpt)
    with pytest.raises(DataError, match=message):
        read(f"fairseq:{DATA}/dat.pt")
